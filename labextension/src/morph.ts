/**
 * Patch a rendered DOM tree into the shape of a freshly built one.
 *
 * Live views redraw up to ten times a second. Replacing the whole tree each
 * time would reset scroll positions, drop hover and text selection, and lose
 * clicks whose mouse-down and mouse-up land on different generations of the
 * same button. Patching keeps every node that is still there, so only the
 * changed text and attributes touch the page.
 *
 * Children carrying a `data-k` attribute are matched by that key (sections
 * that come and go), the others by position. Event listeners on the new
 * tree are not carried over: views handle events by delegation.
 */

function keyOf(node: Node): string | null {
  return node instanceof Element ? node.getAttribute('data-k') : null;
}

function syncAttributes(from: Element, to: Element): void {
  for (const name of from.getAttributeNames()) {
    if (!to.hasAttribute(name)) {
      from.removeAttribute(name);
    }
  }
  for (const name of to.getAttributeNames()) {
    const value = to.getAttribute(name) as string;
    if (from.getAttribute(name) !== value) {
      from.setAttribute(name, value);
    }
  }
}

/**
 * Make `from` look like `to`; returns the node to keep in the document:
 * `from` when it could be patched, else `to` (the caller places it).
 */
function patch(from: Node, to: Node): Node {
  if (from.nodeType !== to.nodeType || from.nodeName !== to.nodeName) {
    return to;
  }
  if (from.nodeType === Node.TEXT_NODE || from.nodeType === Node.COMMENT_NODE) {
    if (from.nodeValue !== to.nodeValue) {
      from.nodeValue = to.nodeValue;
    }
    return from;
  }
  if (from instanceof Element && to instanceof Element) {
    if (from.tagName === 'TR' && from.isEqualNode(to)) {
      return from; // an unchanged table row (most of them, most redraws): one native comparison
    }
    syncAttributes(from, to);
    if (from instanceof HTMLButtonElement && to instanceof HTMLButtonElement) {
      from.disabled = to.disabled;
    }
    morphChildren(from, to);
  }
  return from;
}

/** Make the children of `parent` match the children of `next` (which it consumes). */
export function morphChildren(parent: Element, next: Element): void {
  const old = Array.from(parent.childNodes);
  const keyed = new Map<string, Node>();
  const plain: Node[] = [];
  for (const node of old) {
    const key = keyOf(node);
    if (key !== null) {
      keyed.set(key, node);
    } else {
      plain.push(node);
    }
  }
  let nextPlain = 0;
  const wanted: Node[] = [];
  for (const node of Array.from(next.childNodes)) {
    const key = keyOf(node);
    let match: Node | undefined;
    if (key !== null) {
      match = keyed.get(key);
      keyed.delete(key);
    } else {
      match = plain[nextPlain++];
    }
    wanted.push(match ? patch(match, node) : node);
  }
  // Place the wanted nodes in order; whatever is left over ends up behind them.
  wanted.forEach((node, i) => {
    const here = parent.childNodes[i] ?? null;
    if (here !== node) {
      parent.insertBefore(node, here);
    }
  });
  while (parent.childNodes.length > wanted.length) {
    parent.removeChild(parent.lastChild as Node);
  }
}
