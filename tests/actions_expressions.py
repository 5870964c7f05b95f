"""GitHub Actions expressions (`${{ ... }}`), evaluated as GitHub documents them, for the workflow
harness.

docs.github.com/en/actions/reference/workflows-and-actions/expressions: literals (`null`, booleans,
numbers, 'strings' with '' for a quote), property access (`a.b`, `a['b']`, `a.*.b` is not used
here), `!`, `<`, `<=`, `>`, `>=`, `==`, `!=`, `&&`, `||` (which return one of their operands),
string comparison ignoring case, and the functions contains, startsWith, endsWith, format, join,
toJSON, fromJSON, success, always, failure, cancelled. A missing property is null. Only what the
shipped workflows and the attacks on them use is implemented; anything else raises, so a workflow
using it fails the test instead of being misread.
"""

from __future__ import annotations

import json
import re

TOKEN = re.compile(
    r"\s*(?:(?P<number>-?\d+(?:\.\d+)?)|(?P<string>'(?:[^']|'')*')|(?P<name>[A-Za-z_][\w-]*)"
    r"|(?P<op>&&|\|\||==|!=|<=|>=|[!<>()\[\].,*]))"
)


class ExpressionError(ValueError):
    pass


def _tokens(text: str) -> list[tuple[str, object]]:
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = TOKEN.match(text, pos)
        if not match:
            raise ExpressionError(f"cannot read {text[pos:]!r} in {text!r}")
        pos = match.end()
        kind = match.lastgroup
        value = match.group(kind)
        if kind == "number":
            value = float(value) if "." in value else int(value)
        elif kind == "string":
            value = value[1:-1].replace("''", "'")
        out.append((kind, value))
    out.append(("end", None))
    return out


def truthy(value) -> bool:
    return value not in (None, False, 0, "") and not (isinstance(value, float) and value != value)


def _coerce(value):
    if isinstance(value, bool):
        return int(value)
    if value is None:
        return 0
    if isinstance(value, str):
        try:
            return float(value) if value.strip() else 0
        except ValueError:
            return float("nan")
    return value


def _equal(a, b) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    if type(a) is type(b) or (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        return a == b
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return a is b
    return _coerce(a) == _coerce(b)


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


class _Parser:
    def __init__(self, text: str, contexts: dict, status: dict):
        self.tokens, self.pos, self.contexts, self.status, self.text = (
            _tokens(text),
            0,
            contexts,
            status,
            text,
        )

    def peek(self):
        return self.tokens[self.pos]

    def take(self, value=None):
        token = self.tokens[self.pos]
        if value is not None and token[1] != value:
            raise ExpressionError(f"expected {value!r} in {self.text!r}, got {token[1]!r}")
        self.pos += 1
        return token

    def parse(self):
        value = self.or_()
        if self.peek()[0] != "end":
            raise ExpressionError(f"unexpected {self.peek()[1]!r} in {self.text!r}")
        return value

    def or_(self):
        left = self.and_()
        while self.peek()[1] == "||":
            self.take()
            right = self.and_()
            left = left if truthy(left) else right
        return left

    def and_(self):
        left = self.compare()
        while self.peek()[1] == "&&":
            self.take()
            right = self.compare()
            left = right if truthy(left) else left
        return left

    def compare(self):
        left = self.unary()
        while self.peek()[1] in ("==", "!=", "<", "<=", ">", ">="):
            op = self.take()[1]
            right = self.unary()
            if op == "==":
                left = _equal(left, right)
            elif op == "!=":
                left = not _equal(left, right)
            else:
                a, b = _coerce(left), _coerce(right)
                left = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
        return left

    def unary(self):
        if self.peek()[1] == "!":
            self.take()
            return not truthy(self.unary())
        return self.postfix(self.primary())

    def primary(self):
        kind, value = self.take()
        if kind in ("number", "string"):
            return value
        if kind == "op" and value == "(":
            inner = self.or_()
            self.take(")")
            return inner
        if kind != "name":
            raise ExpressionError(f"unexpected {value!r} in {self.text!r}")
        if value in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[value]
        if self.peek()[1] == "(":
            self.take("(")
            args = []
            while self.peek()[1] != ")":
                args.append(self.or_())
                if self.peek()[1] == ",":
                    self.take(",")
            self.take(")")
            return self.call(value, args)
        if value not in self.contexts:
            raise ExpressionError(f"unknown context {value!r} in {self.text!r}")
        return self.contexts[value]

    def postfix(self, value):
        while self.peek()[1] in (".", "["):
            if self.take()[1] == ".":
                kind, name = self.take()
                if kind != "name":
                    raise ExpressionError(f"bad property {name!r} in {self.text!r}")
                key = name
            else:
                key = self.or_()
                self.take("]")
            if isinstance(value, dict):
                match = next(
                    (
                        k
                        for k in value
                        if isinstance(k, str) and isinstance(key, str) and k.lower() == key.lower()
                    ),
                    None,
                )
                value = value.get(match) if match is not None else None
            elif (
                isinstance(value, list)
                and isinstance(key, (int, float))
                and 0 <= int(key) < len(value)
            ):
                value = value[int(key)]
            else:
                value = None
        return value

    def call(self, name: str, args: list):
        lowered = name.lower()
        if lowered == "contains":
            hay, needle = args
            if isinstance(hay, list):
                return any(_equal(item, needle) for item in hay)
            return _text(needle).lower() in _text(hay).lower()
        if lowered == "startswith":
            return _text(args[0]).lower().startswith(_text(args[1]).lower())
        if lowered == "endswith":
            return _text(args[0]).lower().endswith(_text(args[1]).lower())
        if lowered == "format":
            template, rest = _text(args[0]), args[1:]
            return (
                re.sub(
                    r"\{(\d+)\}",
                    lambda m: _text(rest[int(m[1])]),
                    template.replace("{{", "\0").replace("}}", "\1"),
                )
                .replace("\0", "{")
                .replace("\1", "}")
            )
        if lowered == "join":
            items = args[0] if isinstance(args[0], list) else [args[0]]
            return (_text(args[1]) if len(args) > 1 else ",").join(_text(i) for i in items)
        if lowered == "tojson":
            return json.dumps(args[0], indent=2)
        if lowered == "fromjson":
            return json.loads(_text(args[0]))
        if lowered in ("success", "always", "failure", "cancelled"):
            return {
                "success": self.status["success"],
                "always": True,
                "failure": not self.status["success"],
                "cancelled": False,
            }[lowered]
        raise ExpressionError(
            f"function {name}() is not implemented by the harness ({self.text!r})"
        )


def evaluate(expression: str, contexts: dict, status: dict | None = None):
    """The value of one expression (without `${{ }}`)."""
    return _Parser(expression, contexts, status or {"success": True}).parse()


TEMPLATE = re.compile(r"\$\{\{(.*?)\}\}", re.S)


def render(value, contexts: dict, status: dict | None = None):
    """A workflow value with its `${{ }}` evaluated: a whole-expression string keeps its type (an
    object from fromJSON, a boolean), a string with text around expressions becomes text; lists and
    mappings recursively."""
    if isinstance(value, str):
        whole = TEMPLATE.fullmatch(value.strip())
        if whole:
            return evaluate(whole[1], contexts, status)
        return TEMPLATE.sub(lambda m: _text(evaluate(m[1], contexts, status)), value)
    if isinstance(value, list):
        return [render(v, contexts, status) for v in value]
    if isinstance(value, dict):
        return {k: render(v, contexts, status) for k, v in value.items()}
    return value


def condition(value, contexts: dict, status: dict) -> bool:
    """A job's or step's `if:`: an expression with or without `${{ }}`; a status function is implied
    (`success() && ...`) unless one is used."""
    if value is None:
        return status["success"]
    text = str(value).strip()
    whole = TEMPLATE.fullmatch(text)
    text = whole[1] if whole else text
    if not re.search(r"\b(success|always|failure|cancelled)\s*\(", text):
        text = f"success() && ({text})"
    return truthy(evaluate(text, contexts, status))
