// A small Markdown renderer that builds DOM nodes: the model's text only ever becomes text
// nodes (textContent), never HTML. Blocks: paragraphs, headings, fenced code, quotes, lists,
// tables, rules. Inline: code, bold, italic, strikethrough, links (http, https and mailto
// only, opened apart); an image is shown as its link, never loaded.

/** A new element: its tag, class and text (as text, never HTML). */
export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

const INLINE =
  /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)|\*\*(?=\S)([\s\S]*?\S)\*\*|__(?=\S)([\s\S]*?\S)__|~~(?=\S)([\s\S]*?\S)~~|\*(?=[^\s*])([^*]*?[^\s*])\*|(?<![\w])_(?=[^\s_])([^_]*?[^\s_])_(?![\w])|(!?)\[([^\]\n]*)\]\(([^()\s]+)(?:\s+"[^"\n]*")?\)/g;

/** A link target the page may open: http, https or mailto, else null. */
function safeUrl(href) {
  try {
    const url = new URL(href, document.baseURI);
    return ["http:", "https:", "mailto:"].includes(url.protocol) ? url.href : null;
  } catch {
    return null;
  }
}

/** Inline Markdown of `text` appended to `parent`. */
function inline(parent, text) {
  let at = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > at) parent.append(text.slice(at, m.index));
    at = m.index + m[0].length;
    if (m[1]) {
      parent.append(el("code", "", m[2].replace(/^ (.*) $/s, "$1")));
    } else if (m[3] !== undefined || m[4] !== undefined) {
      const strong = el("strong");
      inline(strong, m[3] ?? m[4]);
      parent.append(strong);
    } else if (m[5] !== undefined) {
      const del = el("del");
      inline(del, m[5]);
      parent.append(del);
    } else if (m[6] !== undefined || m[7] !== undefined) {
      const em = el("em");
      inline(em, m[6] ?? m[7]);
      parent.append(em);
    } else {
      const href = safeUrl(m[10]);
      const label = m[9] || m[10];
      if (!href) {
        parent.append(m[8] ? `[image: ${label}]` : label);
        continue;
      }
      const a = el("a");
      a.href = href;
      a.rel = "noopener noreferrer nofollow";
      a.target = "_blank";
      if (m[8]) a.textContent = `[image: ${label}]`;
      else inline(a, label);
      parent.append(a);
    }
  }
  if (at < text.length) parent.append(text.slice(at));
}

/** Lines of a paragraph, a soft break between each. */
function paragraph(lines) {
  const p = el("p");
  lines.forEach((line, i) => {
    if (i) p.append(el("br"));
    inline(p, line.trim());
  });
  return p;
}

const FENCE = /^ {0,3}(```+|~~~+)\s*([\w+#.-]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;
const TABLE_RULE = /^\s*\|?\s*:?-{1,}:?\s*(\|\s*:?-{1,}:?\s*)*\|?\s*$/;

function cells(line) {
  return line.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((c) => c.trim());
}

/** A fenced code block from `lines[i]` on: the node, and the line after it. */
function code(lines, i, fence) {
  const body = [];
  let j = i + 1;
  for (; j < lines.length; j++) {
    if (lines[j].trim().startsWith(fence[1]) && lines[j].trim().replace(/[`~]/g, "") === "") break;
    body.push(lines[j]);
  }
  const wrap = el("div", "code");
  if (fence[2]) wrap.append(el("span", "lang", fence[2]));
  const pre = el("pre");
  pre.append(el("code", "", body.join("\n")));
  wrap.append(pre);
  return [wrap, j + 1];
}

/** A list from `lines[i]` on: the node, and the line after it. */
function list(lines, i) {
  const first = ITEM.exec(lines[i]);
  const ordered = /\d/.test(first[2]);
  const node = el(ordered ? "ol" : "ul");
  if (ordered && parseInt(first[2], 10) !== 1) node.start = parseInt(first[2], 10);
  // An item's lines: its own, then those indented past its marker (a nested list among them).
  const items = [];
  const indent = (line) => line.length - line.trimStart().length;
  let j = i;
  for (; j < lines.length; j++) {
    const m = ITEM.exec(lines[j]);
    const nested = indent(lines[j]) > first[1].length;
    if (m && !nested && /\d/.test(m[2]) === ordered) {
      items.push([m[3]]);
    } else if (lines[j].trim() && nested) {
      items[items.length - 1].push(lines[j].slice(Math.min(indent(lines[j]), first[1].length + 2)));
    } else {
      break;
    }
  }
  for (const item of items) {
    const li = el("li");
    li.append(render(item.join("\n")));
    node.append(li);
  }
  return [node, j];
}

/** A table from `lines[i]` (its head) on: the node, and the line after it. */
function table(lines, i) {
  const node = el("table");
  const head = el("tr");
  for (const c of cells(lines[i])) inline(head.appendChild(el("th")), c);
  node.append(el("thead"));
  node.firstChild.append(head);
  const body = el("tbody");
  let j = i + 2;
  for (; j < lines.length && lines[j].includes("|") && lines[j].trim(); j++) {
    const row = el("tr");
    for (const c of cells(lines[j])) inline(row.appendChild(el("td")), c);
    body.append(row);
  }
  node.append(body);
  const wrap = el("div", "table-wrap");
  wrap.append(node);
  return [wrap, j];
}

/** Whether `lines[i]` is a table's head (a row, then a rule of dashes). */
function isTable(lines, i) {
  return lines[i].includes("|") && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1]);
}

/** Whether `lines[i]` begins a block other than a paragraph. */
function starts(lines, i) {
  const line = lines[i];
  return [FENCE, HEADING, RULE, ITEM, QUOTE].some((re) => re.test(line)) || isTable(lines, i);
}

/** The Markdown `text` as a fragment of DOM nodes (an unclosed fence, mid-stream, is code). */
export function render(text) {
  const out = document.createDocumentFragment();
  const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (!line.trim()) {
      i++;
    } else if ((m = FENCE.exec(line))) {
      const [node, next] = code(lines, i, m);
      out.append(node);
      i = next;
    } else if ((m = HEADING.exec(line))) {
      const level = Math.min(m[1].length + 2, 6);
      const h = el(`h${level}`);
      inline(h, m[2]);
      out.append(h);
      i++;
    } else if (RULE.test(line)) {
      out.append(el("hr"));
      i++;
    } else if (ITEM.test(line)) {
      const [node, next] = list(lines, i);
      out.append(node);
      i = next;
    } else if (QUOTE.test(line)) {
      const quoted = [];
      for (; i < lines.length && (m = QUOTE.exec(lines[i])); i++) quoted.push(m[1]);
      const q = el("blockquote");
      q.append(render(quoted.join("\n")));
      out.append(q);
    } else if (isTable(lines, i)) {
      const [node, next] = table(lines, i);
      out.append(node);
      i = next;
    } else {
      const held = [line];
      for (i++; i < lines.length && lines[i].trim() && !starts(lines, i); i++) held.push(lines[i]);
      out.append(paragraph(held));
    }
  }
  return out;
}
