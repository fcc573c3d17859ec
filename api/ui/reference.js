// The API reference at /docs: renders /openapi.json with no third-party code and no network access
// beyond this origin (the gateway's Content-Security-Policy allows nothing else). Every value from
// the description is inserted as text, never as markup.
"use strict";

const METHODS = ["get", "post", "put", "patch", "delete"];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

function schemaName(schema) {
  if (!schema) return "";
  if (schema.$ref) return schema.$ref.split("/").pop();
  if (schema.anyOf) return schema.anyOf.map(schemaName).join(" | ");
  if (schema.type === "array") return schemaName(schema.items) + "[]";
  return schema.type || "object";
}

function contentTable(content) {
  const rows = Object.entries(content || {}).map(([type, media]) =>
    el("tr", {}, el("td", {}, el("code", {}, type)), el("td", {}, schemaName(media.schema))));
  return rows.length ? el("table", {}, ...rows) : null;
}

function operation(path, method, op) {
  const body = el("div", { class: "body" });
  if (op.description) body.append(el("p", {}, op.description));
  const params = op.parameters || [];
  if (params.length) {
    body.append(el("h4", {}, "Parameters"));
    body.append(el("table", {}, el("tr", {}, el("th", {}, "name"), el("th", {}, "in"),
      el("th", {}, "type"), el("th", {}, "required")),
      ...params.map((p) => el("tr", {}, el("td", {}, el("code", {}, p.name)), el("td", {}, p.in),
        el("td", {}, schemaName(p.schema)), el("td", {}, p.required ? "yes" : "no")))));
  }
  if (op.requestBody) {
    body.append(el("h4", {}, "Request body"));
    body.append(contentTable(op.requestBody.content));
  }
  body.append(el("h4", {}, "Responses"));
  body.append(el("table", {}, ...Object.entries(op.responses || {}).map(([code, r]) =>
    el("tr", {}, el("td", {}, el("code", {}, code)), el("td", {}, r.description || ""),
      el("td", {}, contentTable(r.content))))));
  const summary = el("summary", {},
    el("span", { class: `method m-${method}` }, method.toUpperCase()),
    el("span", { class: "path" }, path),
    el("span", { class: "muted" }, op.summary || ""));
  return el("details", { class: "op", "data-operation": `${method.toUpperCase()} ${path}` }, summary, body);
}

function render(spec) {
  const intro = document.getElementById("intro");
  intro.textContent = `${spec.info.title} ${spec.info.version}. `;
  intro.append(el("span", {}, spec.info.description || ""));
  intro.className = "";
  const byTag = new Map();
  for (const [path, item] of Object.entries(spec.paths || {})) {
    for (const method of METHODS) {
      if (!item[method]) continue;
      const tag = (item[method].tags || ["other"])[0];
      if (!byTag.has(tag)) byTag.set(tag, []);
      byTag.get(tag).push(operation(path, method, item[method]));
    }
  }
  const ops = document.getElementById("operations");
  for (const [tag, nodes] of byTag) ops.append(el("h2", {}, tag), ...nodes);
  const schemas = Object.entries((spec.components || {}).schemas || {});
  if (schemas.length) document.getElementById("schemas-title").hidden = false;
  const box = document.getElementById("schemas");
  for (const [name, schema] of schemas) {
    box.append(el("details", { class: "op", id: `schema-${name}` },
      el("summary", {}, el("span", { class: "path" }, name)),
      el("div", { class: "body" }, el("pre", {}, JSON.stringify(schema, null, 2)))));
  }
  document.body.dataset.rendered = "yes";
}

fetch("/openapi.json")
  .then((r) => (r.ok ? r.json() : Promise.reject(new Error(`GET /openapi.json: ${r.status}`))))
  .then(render)
  .catch((err) => {
    const intro = document.getElementById("intro");
    intro.textContent = String(err);
    intro.className = "error";
  });
