// A small DOM for running a generated page's script in QuickJS (no network, no files, no real
// browser): enough of document/window/Element for calculators written the usual ways (ids,
// classes, data attributes, inline onclick, addEventListener, event delegation, eval of a display
// string). __ELEMENTS__ is [{tag, attrs, text, parent}] from Python's HTML parser, in document order.
(function () {
  const listeners = new Map();
  function Style() {}
  function El(tag, attrs, text) {
    this.tagName = tag.toUpperCase(); this.nodeName = this.tagName; this._attrs = Object.assign({}, attrs || {});
    this._text = text || ""; this.children = []; this.parentElement = null; this.style = new Style();
    this.value = this._attrs.value !== undefined ? this._attrs.value : "";
    this.id = this._attrs.id || ""; this.className = this._attrs["class"] || "";
    this.dataset = {};
    for (const k in this._attrs) if (k.startsWith("data-"))
      this.dataset[k.slice(5).replace(/-([a-z])/g, (m, c) => c.toUpperCase())] = this._attrs[k];
    const self = this;
    this.classList = {
      contains: (c) => (" " + self.className + " ").includes(" " + c + " "),
      add: (c) => { if (!self.classList.contains(c)) self.className = (self.className + " " + c).trim(); },
      remove: (c) => { self.className = (" " + self.className + " ").replace(" " + c + " ", " ").trim(); },
      toggle: (c) => { self.classList.contains(c) ? self.classList.remove(c) : self.classList.add(c); },
    };
  }
  const text = (el) => el._text + el.children.map(text).join("");
  Object.defineProperty(El.prototype, "textContent", { get() { return text(this); },
    set(v) { this._text = String(v); this.children = []; } });
  Object.defineProperty(El.prototype, "innerText", Object.getOwnPropertyDescriptor(El.prototype, "textContent"));
  Object.defineProperty(El.prototype, "innerHTML", { get() { return text(this); },
    set(v) { this._text = String(v).replace(/<[^>]*>/g, ""); this.children = []; } });
  El.prototype.getAttribute = function (k) { return k in this._attrs ? this._attrs[k] : null; };
  El.prototype.setAttribute = function (k, v) { this._attrs[k] = String(v); if (k === "id") this.id = String(v); };
  El.prototype.hasAttribute = function (k) { return k in this._attrs; };
  El.prototype.addEventListener = function (type, fn) {
    if (!listeners.has(this)) listeners.set(this, []);
    listeners.get(this).push([type, fn]);
  };
  El.prototype.removeEventListener = function () {};
  El.prototype.appendChild = function (c) { c.parentElement = this; this.children.push(c); return c; };
  El.prototype.append = function (...cs) { cs.forEach((c) => typeof c === "string" ? (this._text += c) : this.appendChild(c)); };
  El.prototype.prepend = El.prototype.append;
  El.prototype.remove = function () {};
  El.prototype.focus = El.prototype.blur = El.prototype.scrollIntoView = function () {};
  El.prototype.getBoundingClientRect = () => ({ top: 0, left: 0, width: 100, height: 30, right: 100, bottom: 30 });
  El.prototype.querySelectorAll = function (sel) { return all.filter((e) => e !== this && inside(e, this) && matches(e, sel)); };
  El.prototype.querySelector = function (sel) { return this.querySelectorAll(sel)[0] || null; };
  El.prototype.matches = function (sel) { return matches(this, sel); };
  El.prototype.closest = function (sel) { let e = this; while (e) { if (matches(e, sel)) return e; e = e.parentElement; } return null; };
  El.prototype.dispatch = function (type) {
    const event = { type, target: this, preventDefault() {}, stopPropagation() { this._stop = true; }, key: "" };
    let el = this;
    while (el && !event._stop) {
      event.currentTarget = el;
      if (type === "click" && el._attrs.onclick) new Function("event", el._attrs.onclick).call(el, event);
      if (type === "click" && typeof el.onclick === "function") el.onclick.call(el, event);
      for (const [t, fn] of listeners.get(el) || []) if (t === type) fn.call(el, event);
      el = el.parentElement;
    }
    for (const [t, fn] of listeners.get(document) || []) if (t === type) fn.call(document, event);
  };
  El.prototype.click = function () { this.dispatch("click"); };
  function inside(e, root) { let p = e.parentElement; while (p) { if (p === root) return true; p = p.parentElement; } return false; }
  function simple(e, s) {
    const m = s.match(/^([a-zA-Z0-9]*)((?:[#.][\w-]+)*)((?:\[[^\]]+\])*)$/);
    if (!m) return false;
    if (m[1] && e.tagName !== m[1].toUpperCase()) return false;
    for (const part of m[2].match(/[#.][\w-]+/g) || []) {
      if (part[0] === "#" && e.id !== part.slice(1)) return false;
      if (part[0] === "." && !e.classList.contains(part.slice(1))) return false;
    }
    for (const a of m[3].match(/\[[^\]]+\]/g) || []) {
      const mm = a.slice(1, -1).match(/^([\w-]+)(?:=["']?([^"']*)["']?)?$/);
      if (!mm || !(mm[1] in e._attrs)) return false;
      if (mm[2] !== undefined && e._attrs[mm[1]] !== mm[2]) return false;
    }
    return true;
  }
  function matches(e, sel) {
    return sel.split(",").some((one) => {
      const parts = one.trim().split(/\s+/);
      if (!simple(e, parts[parts.length - 1])) return false;
      let p = e.parentElement;
      for (let i = parts.length - 2; i >= 0; i--) { while (p && !simple(p, parts[i])) p = p.parentElement; if (!p) return false; p = p.parentElement; }
      return true;
    });
  }
  const all = __ELEMENTS__.map((d) => new El(d.tag, d.attrs, d.text));
  __ELEMENTS__.forEach((d, i) => { if (d.parent >= 0) all[d.parent].appendChild(all[i]); });
  const root = all[0] || new El("html", {}, "");
  const document = {
    documentElement: root, body: all.find((e) => e.tagName === "BODY") || root,
    getElementById: (id) => all.find((e) => e.id === id) || null,
    querySelectorAll: (sel) => all.filter((e) => matches(e, sel)),
    querySelector: (sel) => all.find((e) => matches(e, sel)) || null,
    getElementsByClassName: (c) => all.filter((e) => e.classList.contains(c)),
    getElementsByTagName: (t) => all.filter((e) => e.tagName === t.toUpperCase()),
    createElement: (t) => new El(t, {}, ""), createTextNode: (t) => new El("#text", {}, t),
    addEventListener: (type, fn) => { if (!listeners.has(document)) listeners.set(document, []); listeners.get(document).push([type, fn]); },
    removeEventListener: () => {}, readyState: "complete",
  };
  const timers = [];
  globalThis.document = document;
  globalThis.window = globalThis;
  globalThis.addEventListener = (type, fn) => { if (type === "load" || type === "DOMContentLoaded") timers.push(fn); };
  globalThis.setTimeout = (fn) => { if (typeof fn === "function") timers.push(fn); return timers.length; };
  globalThis.setInterval = () => 0; globalThis.clearInterval = globalThis.clearTimeout = () => {};
  globalThis.requestAnimationFrame = () => 0;
  globalThis.alert = globalThis.confirm = () => true; globalThis.prompt = () => "";
  globalThis.console = { log() {}, error() {}, warn() {}, info() {} };
  const store = {};
  globalThis.localStorage = { getItem: (k) => (k in store ? store[k] : null), setItem: (k, v) => { store[k] = String(v); }, removeItem: (k) => { delete store[k]; } };
  globalThis.navigator = { userAgent: "clover-scenario-check" };
  globalThis.location = { href: "about:blank", reload() {} };
  globalThis.__runLoaded = () => {
    for (const [t, fn] of listeners.get(document) || []) if (t === "DOMContentLoaded") fn();
    if (typeof globalThis.onload === "function") globalThis.onload();
    while (timers.length) timers.shift()();
  };
  globalThis.__all = all;
})();
