#!/usr/bin/env python3
"""Renders deploy/helm/llmwatch the way `helm template` would, for CI's
manifest validation where no helm binary can be installed (it is not in
Debian, PyPI or npm). It understands exactly the subset of Go templates the
chart uses and refuses anything else, so a template it renders means what
helm would render:

  {{ .Values.a.b }}  {{ .Release.Name }}  {{ .Release.Namespace }}
  {{ .Chart.Name }}  {{ .Chart.Version }}  {{ .Chart.AppVersion }}
  pipes: | quote   | nindent N   | indent N      toYaml X  (sorted keys, as helm)
  {{ if X }} / {{ if not X }} … {{ end }}  (Go truthiness; nesting allowed)
  {{- and -}} trim the whitespace before / after, newlines included.

Usage: render_chart.py CHART_DIR [--release NAME] [--namespace NS] [--set a.b=v]...
Prints the documents, each after `# Source: CHART/templates/FILE` as helm does.
"""

import argparse
import json
import pathlib
import re
import sys

import yaml

ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)


class Unsupported(Exception):
    pass


def lookup(path, context):
    node = context
    for part in path.split(".")[1:]:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def term(text, context):
    text = text.strip()
    if text.startswith("toYaml "):
        value = term(text[len("toYaml "):], context)
        return yaml.safe_dump(value, default_flow_style=False, sort_keys=True).rstrip("\n")
    if re.fullmatch(r'"[^"\\]*"', text):
        return text[1:-1]
    if re.fullmatch(r"\.(Values|Release|Chart)(\.[A-Za-z_][A-Za-z0-9_]*)+", text):
        return lookup(text, context)
    raise Unsupported(f"unsupported term {text!r}")


def pipeline(text, context, must_exist=True):
    stages = [s.strip() for s in text.split("|")]
    value = term(stages[0], context)
    if value is None and must_exist:
        raise Unsupported(f"{stages[0]} has no value")
    for stage in stages[1:]:
        words = stage.split()
        if words == ["quote"]:
            value = json.dumps("" if value is None else str(value))
        elif len(words) == 2 and words[0] in ("nindent", "indent") and words[1].isdigit():
            pad = " " * int(words[1])
            # As sprig: every line padded, blank ones too.
            body = pad + str(value).replace("\n", "\n" + pad)
            value = ("\n" if words[0] == "nindent" else "") + body
        else:
            raise Unsupported(f"unsupported function {stage!r}")
    return value


def truthy(value):
    return value not in (None, False, 0, "", [], {})


def fmt(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        raise Unsupported("a map or list printed without toYaml")
    return str(value)


def render(template, context):
    out, stack, pos = [], [], 0
    for match in ACTION.finditer(template):
        left, action, right = match.groups()
        text = template[pos:match.start()]
        if left:
            text = text.rstrip(" \t\n\r")
        if all(stack):
            out.append(text)
        pos = match.end()
        if right:
            while pos < len(template) and template[pos] in " \t\n\r":
                pos += 1
        if action.startswith("/*"):
            continue
        if action.startswith("if "):
            condition = action[3:].strip()
            negate = condition.startswith("not ")
            if negate:
                condition = condition[4:]
            held = truthy(pipeline(condition, context, must_exist=False))
            stack.append(held != negate)
        elif action == "end":
            if not stack:
                raise Unsupported("{{ end }} without {{ if }}")
            stack.pop()
        elif all(stack):
            out.append(fmt(pipeline(action, context)))
    if stack:
        raise Unsupported("{{ if }} without {{ end }}")
    out.append(template[pos:])
    return "".join(out)


def set_value(values, assignment):
    path, _, raw = assignment.partition("=")
    node = values
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = yaml.safe_load(raw) if raw else ""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("chart")
    parser.add_argument("--release", default="llmwatch")
    parser.add_argument("--namespace", default="llmwatch")
    parser.add_argument("--set", action="append", default=[])
    args = parser.parse_args()
    chart_dir = pathlib.Path(args.chart)
    chart = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    values = yaml.safe_load((chart_dir / "values.yaml").read_text()) or {}
    for assignment in args.set:
        set_value(values, assignment)
    context = {
        "Values": values,
        "Release": {"Name": args.release, "Namespace": args.namespace},
        "Chart": {"Name": chart["name"], "Version": chart["version"],
                  "AppVersion": chart.get("appVersion", "")},
    }
    for path in sorted((chart_dir / "templates").glob("*.yaml")):
        if path.name.startswith("_"):
            continue
        try:
            text = render(path.read_text(), context)
        except Unsupported as err:
            sys.exit(f"{path}: {err}")
        if text.strip():
            print(f"---\n# Source: {chart['name']}/templates/{path.name}")
            print(text.strip("\n"))


if __name__ == "__main__":
    main()
