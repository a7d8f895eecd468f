"""`ecotone.specs.keywords.from_keywords`: keyword options into a record, with Python's
errors for a function's keywords."""

from __future__ import annotations

import attrs
import pytest

from ecotone.specs.keywords import from_keywords


@attrs.frozen(kw_only=True, slots=True)
class Settings:
    name: str
    size: int = attrs.field(default=1, converter=int)
    _hidden: bool = False


def test_known_keywords_make_the_record_with_its_defaults_and_converters() -> None:
    assert from_keywords(Settings, {"name": "a"}, "f") == Settings(name="a")
    made = from_keywords(Settings, {"name": "a", "size": "3", "hidden": True}, "f")
    assert (made.name, made.size, made._hidden) == ("a", 3, True)  # init takes the alias


def test_an_unknown_keyword_is_a_type_error_that_names_it_and_what_is_taken() -> None:
    with pytest.raises(TypeError, match=r"^f\(\) got unexpected keyword argument 'sise'; "):
        from_keywords(Settings, {"name": "a", "sise": 3}, "f")
    with pytest.raises(TypeError, match=r"arguments '_hidden', 'x'; it takes hidden, name, size$"):
        from_keywords(Settings, {"name": "a", "x": 1, "_hidden": True}, "f")


def test_a_required_keyword_left_out_is_a_type_error_that_names_it() -> None:
    with pytest.raises(TypeError, match=r"^f\(\) missing required keyword argument\(s\) 'name'$"):
        from_keywords(Settings, {"size": 2}, "f")
