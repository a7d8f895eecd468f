// An env's SVG view, shown inline and safely, and a board played by clicking its squares.
//
// `sanitizeSvg(text)` parses the env's SVG as image/svg+xml (never as HTML) and keeps only
// drawing: SVG elements of an allowed list (no script, foreignObject, image, a, animation,
// style element), no event attributes, no link but to a fragment of the picture itself
// (`#white-pawn`), and no CSS url reference but to such a fragment. What is left cannot run
// code or fetch anything, so it is shown in the page itself, where clicks reach it.
//
// `BoardClicks` reads clicks on a board drawn as python-chess draws it (`chess.svg.board`):
// each square a `rect` whose classes name it (`square light e4`). A click on one square and
// then another is a move in UCI (`e2e4`), a pawn's move to the last rank promoting to a queen
// (`e7e8q`) when the legal moves say so; it is handed to `play`, which sends it to the server
// (whose answer says whether it was legal). A second click on a square a legal move starts
// from (another piece of one's own) moves the selection there instead.

const DRAWING = new Set([
  "svg", "g", "defs", "desc", "title", "path", "rect", "circle", "ellipse", "line",
  "polyline", "polygon", "text", "tspan", "use", "symbol", "lineargradient",
  "radialgradient", "stop", "clippath", "mask", "pattern", "marker",
]);

// A CSS url reference to anywhere but a fragment of the picture (`#id`).
const OUTSIDE_URL = /url\s*\(\s*(?!['"]?\s*#)/i;

function safeAttribute(attribute) {
  const name = attribute.localName.toLowerCase();
  const value = attribute.value;
  if (name.startsWith("on")) return false; // onload, onclick, ...
  if (name === "href" || name === "src") { // `href` and `xlink:href` alike
    return /^#[A-Za-z0-9_.:-]*$/.test(value.trim());
  }
  if (OUTSIDE_URL.test(value) || /javascript:|@\s*import|expression\s*\(/i.test(value)) return false;
  return true;
}

function clean(node) {
  for (const attribute of [...node.attributes]) {
    if (!safeAttribute(attribute)) node.removeAttributeNode(attribute);
  }
  for (const child of [...node.children]) {
    if (!(child instanceof SVGElement) || !DRAWING.has(child.localName.toLowerCase())) {
      child.remove();
    } else {
      clean(child);
    }
  }
}

// The env's SVG as an element for this document, cleaned; null when it is not an SVG.
export function sanitizeSvg(text) {
  const parsed = new DOMParser().parseFromString(String(text), "image/svg+xml");
  const root = parsed.documentElement;
  if (parsed.getElementsByTagName("parsererror").length) return null;
  if (!(root instanceof SVGSVGElement)) return null;
  clean(root);
  const svg = document.importNode(root, true);
  svg.removeAttribute("width"); // the panel sizes it (style.css), keeping its viewBox
  svg.removeAttribute("height");
  svg.setAttribute("role", "img");
  return svg;
}

const SQUARE = /^[a-h][1-8]$/;

// The square a `rect.square` names (its class `e4`), or null.
export function squareOf(node) {
  const rect = node instanceof Element ? node.closest("rect.square") : null;
  return rect ? [...rect.classList].find((name) => SQUARE.test(name)) || null : null;
}

export class BoardClicks {
  // `container` holds the board (its SVG replaced at each render); `legal()`: the legal
  // moves (UCI) known to the page, or null; `enabled()`: whether a move may be made now;
  // `play(uci)`: send it.
  constructor(container, { legal, enabled, play }) {
    this.container = container;
    this.legal = legal;
    this.enabled = enabled;
    this.play = play;
    this.from = null;
    container.addEventListener("click", (event) => this.click(event));
  }

  // The board was drawn again (a new SVG): what was selected is forgotten, and the squares
  // say whether they can be clicked now.
  drawn() {
    this.from = null;
    this.update();
  }

  update() {
    const svg = this.container.querySelector("svg");
    if (!svg) return;
    const on = this.enabled();
    svg.classList.toggle("playable", on);
    this.container.dataset.playable = String(on);
    if (!on) this.select(null);
  }

  select(square) {
    this.from = square;
    if (square) this.container.dataset.selected = square;
    else delete this.container.dataset.selected;
    for (const rect of this.container.querySelectorAll("rect.square")) {
      rect.classList.toggle("selected", square !== null && rect.classList.contains(square));
    }
  }

  click(event) {
    const square = squareOf(event.target);
    if (!square || !this.enabled()) return;
    if (this.from === null) {
      this.select(square);
      return;
    }
    if (square === this.from) {
      this.select(null);
      return;
    }
    const legal = this.legal() || [];
    const move = this.from + square;
    const reaches = legal.some((m) => m.startsWith(move));
    if (!reaches && legal.some((m) => m.startsWith(square))) {
      this.select(square); // another piece of one's own: it is the one to move
      return;
    }
    const promotes = legal.includes(`${move}q`) && !legal.includes(move);
    this.select(null);
    this.play(promotes ? `${move}q` : move);
  }
}
