#!/usr/bin/env python3
"""Write src/store/backends/reference/testdata/jinja_cases.json: what jinja2 (as fsspec renders
kerchunk templates: jinja2.Template(text).render(**names)) makes of a set of templates, or that
it refuses them, as test vectors for src/store/backends/reference/template.rs: the renderer must
give jinja2's text or refuse, never render differently. Run with the suite's interpreter:
.venv/bin/python scripts/gen_jinja_cases.py"""

import json
from pathlib import Path

import jinja2

# The names in scope: `templates` entries are strings, `gen` dimensions integers.
NAMES = {"u": "s3://b/f", "name": "t2m", "i": 5, "j": 2, "k": -3}

TEMPLATES = [
    "{{u}}", "{{ u }}_{{i}}.nc", "{{ name }}/{{ i }}.{{ j }}", "{{(i + 1) * 1000}}",
    "k{{i // 2}}.{{i % 2}}", "{{ i * 6 + 1234 }}", "{{ u ~ '.' ~ i }}", "{{ 'a' ~ 1 }}",
    "{{ -7 // 2 }} {{ -7 % 2 }} {{ 7 % -2 }}", "{{ k // 2 }} {{ k % 2 }}", "{{ - i }}",
    "{{ 2 ~ 3 * 4 }}", "{{ (1 + 2) ~ 3 }}", "{{ 1 + 2 ~ 3 }}", "{{ i - j - 1 }}",
    "{{ 2 * (i - j) // 3 }}", "{{ \"dq\" ~ i }}", "no placeholders", "a}}b", "{{ 0 }}",
    # Rendered differently by a naive evaluator: each must be jinja2's text or refused.
    "{{ 10 / 5 }}", "{{ 7 / 2 }}", "{{ i / j }}", "{{ 010 }}", "{{ 00 }}", "{{ 1_000 }}",
    "{{ 1.5 }}", "{{ 1e3 }}", "{{ 0x10 }}", "{{ nope }}", "{{ true }}", "{{ none }}",
    "{{ 'a\\nb' }}", "{{ 'a\\'b' }}", "x\n", "x\r\ny", "{# c #}x", "{% if 1 %}y{% endif %}",
    "a {{- i }}", "{{ i -}} b", "{{ u | upper }}", "{{ u[0] }}", "{{ u.x }}", "{{ 2 ** 3 }}",
    "{{ 'a' * 2 }}", "{{ '%d' % 3 }}", "{{ u + 1 }}", "{{ 1 // 0 }}", "{{ (1 }}", "{{ 1",
    "{{ 99999999999999999999 }}", "{{ i == 5 }}", "{{ i if j else 0 }}", "{{ +i }}",
]


def main() -> None:
    cases = []
    for text in TEMPLATES:
        try:
            cases.append({"template": text, "jinja2": jinja2.Template(text).render(**NAMES)})
        except Exception as e:  # noqa: BLE001 - any refusal by jinja2 is a refusal
            cases.append({"template": text, "jinja2": None, "error": type(e).__name__})
    dest = Path(__file__).resolve().parents[1] / "src/store/backends/reference/testdata/jinja_cases.json"
    dest.write_text(json.dumps({"jinja2": jinja2.__version__, "names": NAMES, "cases": cases},
                               indent=1) + "\n")


if __name__ == "__main__":
    main()
