"""docs/protocol.md is generated from ecotone/specs; it must never drift from them."""

from pathlib import Path

from ecotone.specs import ErrorCode, docgen
from ecotone.specs.frames import REQUEST_OPS

DOC = Path(__file__).resolve().parent.parent / "docs" / "protocol.md"


def test_committed_protocol_doc_matches_the_specs() -> None:
    assert DOC.read_text() == docgen.render(), (
        "docs/protocol.md is stale: run `make docs` and commit the result"
    )


def test_protocol_doc_lists_every_request_op_and_error_code() -> None:
    text = docgen.render()
    for op in REQUEST_OPS:
        assert f"### `{op}`" in text
    for code in ErrorCode:
        assert f"| `{code.value}` |" in text
