"""Renders chat templates as Hugging Face transformers' `apply_chat_template` renders them.

The reference the server's renderer is compared with (tests/e2e/templates.rs). It builds the
environment as transformers' `_compile_jinja_template` builds it, without importing
transformers: jinja2's ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, the
loopcontrols extension and the `{% generation %}` tag, the filter `tojson` and the globals
`raise_exception` and `strftime_now`. The context is passed as transformers passes it to
`render` (the caller builds it: messages, tools, documents, add_generation_prompt, the special
tokens and the template's keyword arguments).

Reads `[{"template": text, "context": {...}}, ...]` on stdin and writes one result for each,
`{"ok": text}` or `{"error": message}`, as a JSON list on stdout.
"""

import json
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(Extension):
    """transformers' `{% generation %}` tag: marks the assistant's text for training masks and
    renders its body as it is (which is all a prompt needs)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_generation_support")
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def strftime_now(format):
    return datetime.now().strftime(format)


def environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, job):
    try:
        return {"ok": env.from_string(job["template"]).render(**job["context"])}
    except Exception as e:  # the template's error, whatever its kind, is the result
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    env = environment()
    jobs = json.load(sys.stdin)
    json.dump([render(env, job) for job in jobs], sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
