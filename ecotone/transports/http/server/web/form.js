// An HTML form generated from a JSON Schema (the subset msgspec and pydantic write), with
// client-side validation that mirrors the schema: required fields, types, bounds, lengths,
// patterns, item counts. Errors are shown next to the field they concern; `showError` puts a
// server's error (a dotted field path such as `pos.2.x`) next to the field it names.
//
//   const form = new SchemaForm(info.action_schema);
//   container.append(form.element);
//   const {ok, value} = form.read();      // ok: value is what the schema accepts
//
// Supported: strings (text, or multi-line), integers and numbers with bounds, booleans,
// enums and consts (select / fixed), nested objects (fieldsets), arrays (add and remove rows),
// tuples (prefixItems), maps (additionalProperties), unions (anyOf/oneOf: pick a variant),
// nullable fields, optional fields (empty = omitted for text and numbers, a checkbox for the
// rest), `$ref`/`$defs` and `allOf`. Anything else is edited as JSON in place.

const OMIT = Symbol("omitted");
const MAX_DEPTH = 12;
const MULTILINE_NAMES = new Set([
  "code", "source", "program", "script", "text", "body", "content", "prompt", "document",
]);
const ANNOTATIONS = new Set([
  "title", "description", "default", "examples", "$comment", "readOnly", "writeOnly",
  "deprecated", "format", "x-gym-space",
]);

let uid = 0;
const nextId = (stem) => `${stem}-${++uid}`;

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

// --- schemas ---------------------------------------------------------------------------

function pointer(ref, root) {
  if (typeof ref !== "string" || !ref.startsWith("#")) return {};
  let node = root;
  for (const raw of ref.slice(1).split("/").slice(1)) {
    const part = raw.replaceAll("~1", "/").replaceAll("~0", "~");
    if (node === null || typeof node !== "object" || !(part in node)) return {};
    node = node[part];
  }
  return node;
}

// `schema` with `$ref` and `allOf` folded in (siblings of a `$ref` kept).
export function resolve(schema, root) {
  for (let i = 0; i < 32; i++) {
    if (schema === null || typeof schema !== "object") return schema;
    if ("$ref" in schema) {
      const { $ref, ...rest } = schema;
      const target = pointer($ref, root);
      schema = typeof target === "object" && target !== null ? { ...target, ...rest } : target;
    } else if (Array.isArray(schema.allOf)) {
      const { allOf, ...merged } = schema;
      for (const part of allOf) {
        const sub = resolve(part, root);
        if (sub === null || typeof sub !== "object") continue;
        for (const [key, value] of Object.entries(sub)) {
          if (key === "properties") merged.properties = { ...(merged.properties || {}), ...value };
          else if (key === "required") merged.required = [...(merged.required || []), ...value];
          else if (!(key in merged)) merged[key] = value;
        }
      }
      schema = merged;
    } else {
      return schema;
    }
  }
  return {};
}

function isAny(schema) {
  if (schema === true || schema === undefined) return true;
  if (schema === null || typeof schema !== "object") return false;
  return Object.keys(schema).every((key) => ANNOTATIONS.has(key));
}

function impliedType(schema) {
  if ("properties" in schema || "additionalProperties" in schema || "required" in schema) {
    return "object";
  }
  if ("items" in schema || "prefixItems" in schema) return "array";
  if ("minLength" in schema || "maxLength" in schema || "pattern" in schema) return "string";
  if ("minimum" in schema || "maximum" in schema) return "number";
  return null;
}

// The alternatives of an `anyOf`/`oneOf`/type list, each resolved.
function alternatives(schema, root) {
  const list = schema.anyOf || schema.oneOf;
  if (Array.isArray(list)) {
    const { anyOf, oneOf, ...rest } = schema;
    return list.map((alt) => {
      const resolved = resolve(alt, root);
      return typeof resolved === "object" && resolved !== null ? { ...rest, ...resolved } : resolved;
    });
  }
  if (Array.isArray(schema.type)) return schema.type.map((type) => ({ ...schema, type }));
  return null;
}

const isNull = (schema) =>
  typeof schema === "object" && schema !== null &&
  (schema.type === "null" || ("const" in schema && schema.const === null));

function jsonType(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number") return Number.isInteger(value) ? "integer" : "number";
  return typeof value; // string, boolean, object
}

// Does `value` look like one of `schema`'s values? (For picking a union's variant.)
function matches(schema, value, root) {
  schema = resolve(schema, root);
  if (isAny(schema)) return true;
  if (schema === false || typeof schema !== "object") return false;
  if ("const" in schema) return JSON.stringify(schema.const) === JSON.stringify(value);
  if (Array.isArray(schema.enum)) {
    return schema.enum.some((m) => JSON.stringify(m) === JSON.stringify(value));
  }
  const alts = alternatives(schema, root);
  if (alts) return alts.some((alt) => matches(alt, value, root));
  const type = schema.type || impliedType(schema);
  const actual = jsonType(value);
  if (type && !(type === actual || (type === "number" && actual === "integer"))) return false;
  if (actual === "object") {
    for (const name of schema.required || []) if (!(name in value)) return false;
    for (const [name, sub] of Object.entries(schema.properties || {})) {
      const prop = resolve(sub, root);
      const tag = prop && typeof prop === "object" &&
        ("const" in prop || (Array.isArray(prop.enum) && prop.enum.length === 1));
      if (tag && name in value && !matches(prop, value[name], root)) return false;
    }
  }
  return true;
}

function variantLabel(schema, index) {
  if (typeof schema !== "object" || schema === null) return `variant ${index + 1}`;
  if (schema.title) return schema.title;
  if ("const" in schema) return JSON.stringify(schema.const);
  for (const prop of Object.values(schema.properties || {})) {
    if (prop && "const" in prop) return String(prop.const);
    if (prop && Array.isArray(prop.enum) && prop.enum.length === 1) return String(prop.enum[0]);
  }
  if (schema.type) return String(schema.type);
  return `variant ${index + 1}`;
}

const show = (value) => (typeof value === "string" ? value : JSON.stringify(value));

// What the schema allows, in words, shown under a field.
function hint(schema, type) {
  if (typeof schema !== "object" || schema === null) return "";
  const parts = [];
  if (type) parts.push(type);
  const bound = (key, word) => {
    if (typeof schema[key] === "number") parts.push(`${word} ${schema[key]}`);
  };
  bound("minimum", ">=");
  bound("exclusiveMinimum", ">");
  bound("maximum", "<=");
  bound("exclusiveMaximum", "<");
  bound("multipleOf", "multiple of");
  bound("minLength", "min length");
  bound("maxLength", "max length");
  bound("minItems", "min items");
  bound("maxItems", "max items");
  if (typeof schema.pattern === "string") parts.push(`pattern ${schema.pattern}`);
  if ("default" in schema) parts.push(`default ${JSON.stringify(schema.default)}`);
  return parts.join(", ");
}

// --- validation shared by controls ------------------------------------------------------

function typeWords(kind, schema) {
  if (kind === "enum" || kind === "const") return null;
  if (kind !== "json") return kind;
  const type = typeof schema === "object" && schema !== null ? schema.type : null;
  return typeof type === "string" ? `JSON ${type}` : "JSON";
}

function checkNumber(schema, n, integer) {
  if (!Number.isFinite(n)) return "must be a number";
  if (integer && !Number.isInteger(n)) return "must be an integer";
  if (typeof schema.minimum === "number" && n < schema.minimum) {
    return `must be at least ${schema.minimum}`;
  }
  if (typeof schema.maximum === "number" && n > schema.maximum) {
    return `must be at most ${schema.maximum}`;
  }
  if (typeof schema.exclusiveMinimum === "number" && n <= schema.exclusiveMinimum) {
    return `must be greater than ${schema.exclusiveMinimum}`;
  }
  if (typeof schema.exclusiveMaximum === "number" && n >= schema.exclusiveMaximum) {
    return `must be less than ${schema.exclusiveMaximum}`;
  }
  const step = schema.multipleOf;
  if (typeof step === "number" && step > 0) {
    const ratio = n / step;
    if (Math.abs(ratio - Math.round(ratio)) > 1e-9) return `must be a multiple of ${step}`;
  }
  return null;
}

function checkString(schema, text) {
  const length = [...text].length;
  if (typeof schema.minLength === "number" && length < schema.minLength) {
    return `must be at least ${schema.minLength} characters`;
  }
  if (typeof schema.maxLength === "number" && length > schema.maxLength) {
    return `must be at most ${schema.maxLength} characters`;
  }
  if (typeof schema.pattern === "string") {
    let re = null;
    try {
      re = new RegExp(schema.pattern, "u");
    } catch {
      re = null; // a pattern JavaScript cannot read: the server checks it
    }
    if (re && !re.test(text)) return `must match the pattern ${schema.pattern}`;
  }
  return null;
}

// --- fields: a label, an optional "include" box, a control, an error slot ---------------

// Which controls use "empty means omitted" for optional fields (the rest get a checkbox).
const EMPTY_OMITS = new Set(["string", "number", "integer", "enum"]);

class Field {
  constructor(form, schema, { name, label, required, depth, path, removable }) {
    this.form = form;
    this.name = name;
    this.depth = depth;
    this.required = required;
    this.raw = schema;
    let resolved = resolve(schema, form.root);
    // Nullable: `X | None` is X with a way to say null.
    this.nullable = false;
    const alts = resolved && typeof resolved === "object" ? alternatives(resolved, form.root) : null;
    if (alts && alts.some(isNull)) {
      const rest = alts.filter((alt) => !isNull(alt));
      if (rest.length === 1) {
        const { anyOf, oneOf, type, ...outer } = resolved;
        resolved = { ...outer, ...rest[0] };
        if ("default" in outer) resolved.default = outer.default;
        this.nullable = true;
      }
    }
    this.schema = resolved;
    this.kind = kindOf(resolved, form.root, depth);
    this.element = el("div", { class: `field field-${this.kind}` });
    this.errorEl = el("div", { class: "field-error", id: nextId("err"), "aria-live": "polite" });
    this.control = null;
    this.controlId = nextId("f");
    this.head = el("div", { class: "field-head" });
    this.labelEl = el("label", { for: this.controlId, text: label ?? "" });
    if (label !== null && label !== undefined) this.head.append(this.labelEl);
    this.optionalMode = required ? null : EMPTY_OMITS.has(this.kind) ? "empty" : "checkbox";
    this.includeBox = null;
    this.nullBox = null;
    if (this.optionalMode === "checkbox") {
      this.includeBox = el("input", {
        type: "checkbox",
        class: "include",
        "aria-label": `include ${label ?? "value"}`,
        onchange: () => this.setIncluded(this.includeBox.checked),
      });
      this.head.append(el("label", { class: "include-label" }, this.includeBox, " include"));
    } else if (required && this.nullable) {
      this.nullBox = el("input", {
        type: "checkbox",
        class: "null",
        "aria-label": `${label ?? "value"} is null`,
        onchange: () => this.syncNull(),
      });
      this.head.append(el("label", { class: "include-label" }, this.nullBox, " null"));
    }
    if (!required) this.head.append(el("span", { class: "optional", text: "optional" }));
    if (removable) this.head.append(removable);
    this.element.append(this.head);
    const words = hint(resolved, typeWords(this.kind, resolved));
    this.body = el("div", { class: "field-body" });
    this.element.append(this.body);
    if (typeof resolved === "object" && resolved !== null && resolved.description) {
      this.element.append(el("div", { class: "description", text: resolved.description }));
    }
    if (words && !["object", "array", "map", "union", "tuple"].includes(this.kind)) {
      this.element.append(el("div", { class: "hint", text: words }));
    }
    this.element.append(this.errorEl);
    this.setPath(path);
    if (this.optionalMode !== "checkbox") this.build();
  }

  build() {
    if (this.control) return;
    this.control = makeControl(this, this.schema, this.kind);
    this.body.append(this.control.element);
  }

  setIncluded(on) {
    if (!this.includeBox) return;
    this.includeBox.checked = on;
    if (on) this.build();
    this.body.hidden = !on;
  }

  syncNull() {
    if (this.control && this.nullBox) this.control.setDisabled?.(this.nullBox.checked);
  }

  setPath(path) {
    this.path = path;
    this.element.dataset.field = path.join(".");
    this.control?.setPath?.(path);
  }

  clearErrors() {
    this.errorEl.textContent = "";
    this.element.classList.remove("invalid");
    this.control?.fields?.().forEach((f) => f.clearErrors());
  }

  showError(message) {
    this.errorEl.textContent = message;
    this.element.classList.add("invalid");
  }

  // The value, OMIT when an optional field is left out; problems go into `errors`.
  read(errors) {
    if (this.includeBox && !this.includeBox.checked) return OMIT;
    if (this.nullBox && this.nullBox.checked) return null;
    this.build();
    const value = this.control.read(errors, this);
    if (value === OMIT && this.required) {
      errors.push({ field: this, message: "required" });
      return undefined;
    }
    return value;
  }

  // Show `value` (OMIT: leave out); false when the form cannot express it.
  set(value) {
    if (value === OMIT) {
      if (this.includeBox) {
        this.setIncluded(false);
        return true;
      }
      if (this.optionalMode === "empty") {
        this.build();
        return this.control.set(OMIT);
      }
      return !this.required;
    }
    if (value === null && this.nullable && !this.nullBox) {
      // An optional nullable field shows null as left out, which is right when null is its
      // default (`x: T | None = None`).
      if (this.includeBox) {
        this.setIncluded(false);
      } else {
        this.build();
        this.control.set(OMIT);
      }
      return typeof this.schema === "object" && this.schema.default === null;
    }
    if (this.includeBox) this.setIncluded(true);
    if (value === null && this.nullBox) {
      this.nullBox.checked = true;
      this.syncNull();
      return true;
    }
    if (this.nullBox) {
      this.nullBox.checked = false;
      this.syncNull();
    }
    this.build();
    return this.control.set(value);
  }

  // The deepest field along `parts` (a dotted path split), and how many parts it used.
  locate(parts) {
    if (parts.length === 0 || !this.control || !this.control.child) return [this, 0];
    const child = this.control.child(parts[0]);
    if (!child) return [this, 0];
    const [found, used] = child.locate(parts.slice(1));
    return [found, used + 1];
  }
}

function kindOf(schema, root, depth) {
  if (depth > MAX_DEPTH || isAny(schema) || typeof schema !== "object" || schema === null) {
    return "json";
  }
  if ("const" in schema || (Array.isArray(schema.enum) && schema.enum.length === 1)) {
    return "const"; // a tag of a tagged union, say
  }
  if (Array.isArray(schema.enum)) return "enum";
  if (alternatives(schema, root)) return "union";
  const type = schema.type || impliedType(schema);
  if (type === "object") {
    if (schema.properties && Object.keys(schema.properties).length) return "object";
    const extra = schema.additionalProperties;
    if (extra && typeof extra === "object" && !isAny(extra)) return "map";
    return "json";
  }
  if (type === "array") {
    if (Array.isArray(schema.prefixItems)) {
      return schema.items === false || schema.items === undefined ? "tuple" : "json";
    }
    return "array";
  }
  if (["string", "integer", "number", "boolean", "null"].includes(type)) return type;
  return "json";
}

// --- controls ----------------------------------------------------------------------------

function makeControl(field, schema, kind) {
  switch (kind) {
    case "string": return new StringControl(field, schema);
    case "integer": return new NumberControl(field, schema, true);
    case "number": return new NumberControl(field, schema, false);
    case "boolean": return new BooleanControl(field, schema);
    case "null": return new ConstControl(field, { const: null });
    case "const": return new ConstControl(field, schema);
    case "enum": return new EnumControl(field, schema);
    case "object": return new ObjectControl(field, schema);
    case "array": return new ArrayControl(field, schema);
    case "tuple": return new TupleControl(field, schema);
    case "map": return new MapControl(field, schema);
    case "union": return new UnionControl(field, schema);
    default: return new JsonControl(field, schema);
  }
}

function describedBy(field) {
  return field.errorEl.id;
}

class StringControl {
  constructor(field, schema) {
    this.field = field;
    this.schema = schema;
    const long = typeof schema.maxLength === "number" ? schema.maxLength > 200 : false;
    const multiline = long || schema.contentMediaType !== undefined ||
      MULTILINE_NAMES.has(String(field.name || "").toLowerCase());
    this.element = el("div", { class: "string-control" });
    this.toggle = el("button", {
      type: "button",
      class: "small",
      title: "switch between one line and several",
      text: "multi-line",
      onclick: () => this.setMultiline(!this.multiline),
    });
    this.input = null;
    this.setMultiline(multiline);
    if (typeof schema.default === "string" && field.required) this.input.value = schema.default;
    this.element.append(this.toggle);
  }

  setMultiline(on) {
    const old = this.input;
    this.multiline = on;
    const attrs = {
      id: this.field.controlId,
      "aria-describedby": describedBy(this.field),
      spellcheck: "false",
      placeholder: this.field.required ? "" : placeholder(this.schema),
    };
    this.input = on ? el("textarea", { ...attrs, rows: 8 }) : el("input", { ...attrs, type: "text" });
    if (old) {
      this.input.value = old.value;
      old.replaceWith(this.input);
    } else {
      this.element.prepend(this.input);
    }
    this.toggle.textContent = on ? "one line" : "multi-line";
  }

  read(errors, field) {
    const text = this.input.value;
    if (text === "" && !field.required) return OMIT;
    const problem = checkString(this.schema, text);
    if (problem) errors.push({ field, message: problem });
    return text;
  }

  set(value) {
    if (value === OMIT) {
      this.input.value = "";
      return true;
    }
    if (typeof value !== "string") return false;
    if (value.includes("\n") && !this.multiline) this.setMultiline(true);
    this.input.value = value;
    return true;
  }

  setDisabled(on) {
    this.input.disabled = on;
  }
}

function placeholder(schema) {
  return "default" in schema ? `omitted (default ${show(schema.default)})` : "omitted";
}

class NumberControl {
  constructor(field, schema, integer) {
    this.field = field;
    this.schema = schema;
    this.integer = integer;
    const step = typeof schema.multipleOf === "number" ? schema.multipleOf : integer ? 1 : "any";
    this.input = el("input", {
      id: field.controlId,
      type: "number",
      step,
      min: schema.minimum ?? undefined,
      max: schema.maximum ?? undefined,
      inputmode: integer ? "numeric" : "decimal",
      "aria-describedby": describedBy(field),
      placeholder: field.required ? "" : placeholder(schema),
    });
    if (typeof schema.default === "number" && field.required) this.input.value = schema.default;
    this.element = this.input;
  }

  read(errors, field) {
    const text = this.input.value.trim();
    if (this.input.validity.badInput) {
      errors.push({ field, message: this.integer ? "must be an integer" : "must be a number" });
      return undefined;
    }
    if (text === "") return OMIT;
    const n = Number(text);
    const problem = checkNumber(this.schema, n, this.integer);
    if (problem) errors.push({ field, message: problem });
    return n;
  }

  set(value) {
    if (value === OMIT) {
      this.input.value = "";
      return true;
    }
    if (typeof value !== "number") return false;
    this.input.value = String(value);
    return true;
  }

  setDisabled(on) {
    this.input.disabled = on;
  }
}

class BooleanControl {
  constructor(field, schema) {
    this.input = el("input", {
      id: field.controlId,
      type: "checkbox",
      "aria-describedby": describedBy(field),
    });
    this.input.checked = schema.default === true;
    this.element = this.input;
  }

  read() {
    return this.input.checked;
  }

  set(value) {
    if (typeof value !== "boolean") return false;
    this.input.checked = value;
    return true;
  }

  setDisabled(on) {
    this.input.disabled = on;
  }
}

class ConstControl {
  constructor(field, schema) {
    this.value = "const" in schema ? schema.const : schema.enum[0];
    this.element = el("output", { id: field.controlId, class: "const", text: show(this.value) });
  }

  read() {
    return this.value;
  }

  set(value) {
    return JSON.stringify(value) === JSON.stringify(this.value);
  }
}

class EnumControl {
  constructor(field, schema) {
    this.members = schema.enum;
    this.field = field;
    this.select = el("select", { id: field.controlId, "aria-describedby": describedBy(field) });
    if (!field.required) {
      this.select.append(el("option", { value: "", text: placeholder(schema) }));
    }
    this.members.forEach((member, i) => {
      this.select.append(el("option", { value: String(i), text: show(member) }));
    });
    if (field.required && "default" in schema) this.set(schema.default);
    this.element = this.select;
  }

  read() {
    if (this.select.value === "") return OMIT;
    return this.members[Number(this.select.value)];
  }

  set(value) {
    if (value === OMIT) {
      if (this.field.required) return false;
      this.select.value = "";
      return true;
    }
    const index = this.members.findIndex((m) => JSON.stringify(m) === JSON.stringify(value));
    if (index < 0) return false;
    this.select.value = String(index);
    return true;
  }

  setDisabled(on) {
    this.select.disabled = on;
  }
}

class ObjectControl {
  constructor(field, schema) {
    this.field = field;
    const required = new Set(schema.required || []);
    this.extraAllowed = schema.additionalProperties !== false;
    this.children = new Map();
    const top = field.depth === 0;
    this.element = top ? el("div", { class: "object top" }) : el("fieldset", { class: "object" });
    if (!top) {
      this.element.append(el("legend", { text: schema.title || field.name || "object" }));
    }
    // Required fields first, in schema order; then the optional ones.
    const names = Object.keys(schema.properties);
    names.sort((a, b) => Number(required.has(b)) - Number(required.has(a)));
    for (const name of names) {
      const child = new Field(field.form, schema.properties[name], {
        name,
        label: name,
        required: required.has(name),
        depth: field.depth + 1,
        path: [...field.path, name],
      });
      this.children.set(name, child);
      this.element.append(child.element);
    }
  }

  fields() {
    return [...this.children.values()];
  }

  child(name) {
    return this.children.get(name) || null;
  }

  setPath(path) {
    for (const [name, child] of this.children) child.setPath([...path, name]);
  }

  read(errors) {
    const out = {};
    for (const [name, child] of this.children) {
      const value = child.read(errors);
      if (value !== OMIT) out[name] = value;
    }
    return out;
  }

  set(value) {
    if (jsonType(value) !== "object") return false;
    let ok = true;
    for (const key of Object.keys(value)) if (!this.children.has(key)) ok = false;
    for (const [name, child] of this.children) {
      ok = child.set(name in value ? value[name] : OMIT) && ok;
    }
    return ok;
  }

  setDisabled(on) {
    this.element.toggleAttribute("inert", on);
  }
}

// Rows that can be added and removed: arrays (value rows) and maps (key + value rows).
class RowsControl {
  constructor(field, schema, itemSchema, { keyed }) {
    this.field = field;
    this.schema = schema;
    this.itemSchema = itemSchema === undefined ? true : itemSchema;
    this.keyed = keyed;
    this.rows = [];
    this.list = el("div", { class: "rows" });
    const noun = keyed ? "entry" : "item";
    this.addButton = el("button", {
      type: "button",
      class: "small add",
      text: `+ add ${noun}`,
      "aria-label": `add ${noun} to ${field.name || "list"}`,
      onclick: () => {
        this.addRow();
        this.sync();
      },
    });
    this.element = el("div", { class: keyed ? "map" : "array", id: field.controlId },
      this.list, this.addButton);
    const minimum = keyed ? schema.minProperties : schema.minItems;
    for (let i = 0; i < (minimum || 0); i++) this.addRow();
    this.sync();
  }

  get maxRows() {
    const max = this.keyed ? this.schema.maxProperties : this.schema.maxItems;
    return typeof max === "number" ? max : Infinity;
  }

  addRow() {
    const row = { key: null, field: null, element: el("div", { class: "row" }) };
    const remove = el("button", {
      type: "button",
      class: "small remove",
      text: "remove",
      onclick: () => {
        this.rows.splice(this.rows.indexOf(row), 1);
        row.element.remove();
        this.sync();
      },
    });
    const index = this.rows.length;
    if (this.keyed) {
      row.key = el("input", { type: "text", class: "key", placeholder: "key", "aria-label": "key" });
    }
    row.field = new Field(this.field.form, this.itemSchema, {
      name: this.field.name,
      label: this.keyed ? "value" : `[${index}]`,
      required: true,
      depth: this.field.depth + 1,
      path: [...this.field.path, String(index)],
      removable: remove,
    });
    if (row.key) row.element.append(row.key);
    row.element.append(row.field.element);
    this.rows.push(row);
    this.list.append(row.element);
    return row;
  }

  // Renumber rows and labels, and allow adding only below the maximum.
  sync() {
    this.rows.forEach((row, i) => {
      if (!this.keyed) {
        row.field.labelEl.textContent = `[${i}]`;
        row.field.setPath([...this.field.path, String(i)]);
      } else {
        row.field.setPath([...this.field.path, row.key.value || String(i)]);
      }
    });
    this.addButton.disabled = this.rows.length >= this.maxRows;
  }

  fields() {
    return this.rows.map((row) => row.field);
  }

  child(part) {
    if (this.keyed) {
      const row = this.rows.find((r) => r.key.value === part);
      return row ? row.field : null;
    }
    const row = this.rows[Number(part)];
    return /^\d+$/.test(part) && row ? row.field : null;
  }

  setPath(path) {
    this.field.path = path;
    this.sync();
  }

  checkCount(errors, field, count) {
    const [min, max] = this.keyed
      ? [this.schema.minProperties, this.schema.maxProperties]
      : [this.schema.minItems, this.schema.maxItems];
    const noun = this.keyed ? "entries" : "items";
    if (typeof min === "number" && count < min) {
      errors.push({ field, message: `needs at least ${min} ${noun}` });
    }
    if (typeof max === "number" && count > max) {
      errors.push({ field, message: `takes at most ${max} ${noun}` });
    }
  }

  clear() {
    for (const row of this.rows) row.element.remove();
    this.rows = [];
  }

  setDisabled(on) {
    this.element.toggleAttribute("inert", on);
  }
}

class ArrayControl extends RowsControl {
  constructor(field, schema) {
    super(field, schema, schema.items, { keyed: false });
  }

  read(errors, field) {
    const values = this.rows.map((row) => row.field.read(errors));
    this.checkCount(errors, field, values.length);
    if (this.schema.uniqueItems) {
      const seen = new Set(values.map((v) => JSON.stringify(v)));
      if (seen.size !== values.length) errors.push({ field, message: "items must be unique" });
    }
    return values;
  }

  set(value) {
    if (!Array.isArray(value)) return false;
    this.clear();
    let ok = true;
    for (const item of value) ok = this.addRow().field.set(item) && ok;
    this.sync();
    return ok;
  }
}

class MapControl extends RowsControl {
  constructor(field, schema) {
    super(field, schema, schema.additionalProperties, { keyed: true });
  }

  read(errors, field) {
    const out = {};
    for (const row of this.rows) {
      const key = row.key.value;
      if (key === "") errors.push({ field: row.field, message: "needs a key" });
      else if (key in out) errors.push({ field: row.field, message: `duplicate key ${key}` });
      out[key] = row.field.read(errors);
    }
    this.checkCount(errors, field, this.rows.length);
    return out;
  }

  set(value) {
    if (jsonType(value) !== "object") return false;
    this.clear();
    let ok = true;
    for (const [key, item] of Object.entries(value)) {
      const row = this.addRow();
      row.key.value = key;
      ok = row.field.set(item) && ok;
    }
    this.sync();
    return ok;
  }
}

class TupleControl {
  constructor(field, schema) {
    this.element = el("div", { class: "tuple", id: field.controlId });
    this.items = schema.prefixItems.map((sub, i) => {
      const item = new Field(field.form, sub, {
        name: field.name,
        label: `[${i}]`,
        required: true,
        depth: field.depth + 1,
        path: [...field.path, String(i)],
      });
      this.element.append(item.element);
      return item;
    });
  }

  fields() {
    return this.items;
  }

  child(part) {
    return /^\d+$/.test(part) ? this.items[Number(part)] || null : null;
  }

  setPath(path) {
    this.items.forEach((item, i) => item.setPath([...path, String(i)]));
  }

  read(errors) {
    return this.items.map((item) => item.read(errors));
  }

  set(value) {
    if (!Array.isArray(value) || value.length !== this.items.length) return false;
    return this.items.every((item, i) => item.set(value[i]));
  }

  setDisabled(on) {
    this.element.toggleAttribute("inert", on);
  }
}

class UnionControl {
  constructor(field, schema) {
    this.field = field;
    this.options = alternatives(schema, field.form.root);
    this.select = el("select", {
      id: field.controlId,
      class: "variant",
      "aria-label": `${field.name || "value"}: which kind`,
      onchange: () => this.choose(Number(this.select.value)),
    });
    this.options.forEach((option, i) => {
      this.select.append(el("option", { value: String(i), text: variantLabel(option, i) }));
    });
    this.slot = el("div", { class: "variant-body" });
    this.element = el("div", { class: "union" }, this.select, this.slot);
    this.active = null;
    this.choose(0);
  }

  choose(index) {
    this.select.value = String(index);
    this.active = new Field(this.field.form, this.options[index], {
      name: this.field.name,
      label: null,
      required: true,
      depth: this.field.depth + 1,
      path: this.field.path,
    });
    this.slot.replaceChildren(this.active.element);
  }

  fields() {
    return [this.active];
  }

  child(part) {
    return this.active.control?.child?.(part) || null;
  }

  setPath(path) {
    this.active.setPath(path);
  }

  read(errors) {
    return this.active.read(errors);
  }

  set(value) {
    const index = this.options.findIndex((o) => matches(o, value, this.field.form.root));
    if (index < 0) return false;
    this.choose(index);
    return this.active.set(value);
  }

  setDisabled(on) {
    this.element.toggleAttribute("inert", on);
  }
}

// Any JSON value, typed as text (for `Any`, free-form objects, and what the form cannot show).
class JsonControl {
  constructor(field, schema) {
    this.field = field;
    this.schema = schema;
    this.expected = typeof schema === "object" && schema !== null
      ? schema.type || impliedType(schema)
      : null;
    const initial = this.expected === "object" ? "{}" : this.expected === "array" ? "[]" : "";
    this.input = el("textarea", {
      id: field.controlId,
      class: "json-input",
      rows: 2,
      spellcheck: "false",
      placeholder: "JSON",
      "aria-describedby": describedBy(field),
    });
    const given = typeof schema === "object" && schema !== null && "default" in schema;
    this.input.value = given ? JSON.stringify(schema.default) : initial;
    this.element = this.input;
  }

  read(errors, field) {
    const text = this.input.value.trim();
    if (text === "") return OMIT;
    let value;
    try {
      value = JSON.parse(text);
    } catch (exc) {
      errors.push({ field, message: `not valid JSON: ${exc.message}` });
      return undefined;
    }
    if (this.expected && typeof this.expected === "string") {
      const actual = jsonType(value);
      const fits = actual === this.expected ||
        (this.expected === "number" && actual === "integer");
      if (!fits) errors.push({ field, message: `must be JSON of type ${this.expected}` });
    }
    return value;
  }

  set(value) {
    this.input.value = value === OMIT ? "" : JSON.stringify(value, null, 1);
    return true;
  }

  setDisabled(on) {
    this.input.disabled = on;
  }
}

// --- the form ---------------------------------------------------------------------------

export class SchemaForm {
  constructor(schema) {
    this.root = schema;
    this.top = new Field(this, schema, {
      name: "",
      label: null,
      required: true,
      depth: 0,
      path: [],
    });
    this.element = el("div", { class: "schema-form" }, this.top.element);
  }

  clearErrors() {
    this.top.clearErrors();
  }

  // {ok, value, errors}; with `quiet`, errors are not shown.
  read({ quiet = false } = {}) {
    this.clearErrors();
    const errors = [];
    const value = this.top.read(errors);
    if (!quiet) {
      const seen = new Map();
      for (const { field, message } of errors) {
        seen.set(field, seen.has(field) ? `${seen.get(field)}; ${message}` : message);
      }
      for (const [field, message] of seen) field.showError(message);
      const first = errors[0]?.field.element.querySelector("input, select, textarea");
      first?.focus();
    }
    return { ok: errors.length === 0, value: value === OMIT ? {} : value, errors };
  }

  // Fill the form with `value`; false when the form cannot show all of it.
  setValue(value) {
    this.clearErrors();
    return this.top.set(value);
  }

  // Show a message next to the field a dotted path names (or the nearest one that exists);
  // returns that field's element.
  showError(path, message) {
    const parts = path ? String(path).split(".") : [];
    const [field, used] = this.top.locate(parts);
    const rest = parts.slice(used).join(".");
    field.showError(rest ? `${rest}: ${message}` : message);
    return field.element;
  }
}
