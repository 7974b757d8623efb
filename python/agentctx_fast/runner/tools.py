"""Tools the agent can call and the paged tool-result protocol.

>>> def get_order(order_id: str, verbose: bool = False) -> dict:
...     '''Look an order up by its id.'''
...     return {"id": order_id, "status": "shipped"}
>>> lookup = Tool("get_order", get_order)
>>> lookup.parameters["required"], lookup.description
(['order_id'], 'Look an order up by its id.')
>>> lookup.invoke('{"order_id": "ORD-1"}').text
'{"id": "ORD-1", "status": "shipped"}'

`Tool.from_function` and `@tool` also validate and convert the model's arguments (pydantic):

>>> @tool
... def add_to_cart(sku: str, qty: int = 1) -> str:
...     '''Add a product to the cart.
...
...     Args:
...         sku: The product code.
...         qty: How many.
...     '''
...     return f"{qty} x {sku}"
>>> add_to_cart.name, add_to_cart.parameters["properties"]["qty"]
('add_to_cart', {'default': 1, 'description': 'How many.', 'type': 'integer'})
>>> add_to_cart.invoke('{"sku": "A-1", "qty": "3"}').text
'3 x A-1'
>>> add_to_cart.invoke('{"sku": "A-1", "qty": "many"}').text
"invalid arguments for tool add_to_cart: qty: Input should be a valid integer, unable to parse \
string as an integer (got 'many')"
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from agentctx_fast.errors import InvalidArgumentError

_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    tuple: "array",
    dict: "object",
}


@dataclass(frozen=True, slots=True)
class ToolResultPage:
    """One page of a large tool result, so a tool never returns an unbounded blob.

    The model reads ``has_more`` and asks for the next page by passing ``next_cursor`` back as
    the tool's ``cursor`` argument; a call with a non-null ``cursor`` counts as a page request.

    >>> ToolResultPage([{"id": 1}], has_more=True, next_cursor="c2").to_text()
    '{"items": [{"id": 1}], "has_more": true, "next_cursor": "c2", "truncated": false}'
    """

    items: Sequence[Any]
    has_more: bool
    next_cursor: str | None = None
    truncated: bool = False
    truncation_reason: str | None = None

    def to_text(self) -> str:
        """The page as the JSON text of a `ToolMessage`."""
        body: dict[str, Any] = {
            "items": list(self.items),
            "has_more": self.has_more,
            "next_cursor": self.next_cursor,
            "truncated": self.truncated,
        }
        if self.truncation_reason is not None:
            body["truncation_reason"] = self.truncation_reason
        return json.dumps(body, ensure_ascii=False, allow_nan=False)


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What one tool call produced: the result text and how it went."""

    text: str
    is_error: bool = False
    truncated: bool = False
    page_request: bool = False
    # The tool's exception when it raised (the runner logs it and may reformat ``text``).
    error: Exception | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Tool:
    """A function the model may call. ``parameters`` (a JSON schema) is derived from ``fn``'s
    signature when None; ``requires_approval`` suspends the turn until the user decides;
    ``idempotent`` says a call may run again when its process died before it returned (a
    resumed turn runs it again; otherwise the turn records the call's start before it runs,
    and the model is told it was interrupted and may have run).

    ``arguments_validator`` turns the call's parsed JSON arguments into ``fn``'s keyword
    arguments, raising `ValueError` (whose text the model reads) when they are not valid;
    `Tool.from_function` sets one built by pydantic. Without one, the arguments are passed as
    they were parsed."""

    name: str
    fn: Callable[..., Any]
    description: str = ""
    parameters: Mapping[str, Any] | None = field(default=None)
    requires_approval: bool = False
    idempotent: bool = False
    arguments_validator: Callable[[dict[str, Any]], Mapping[str, Any]] | None = None

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        requires_approval: bool = False,
        idempotent: bool = False,
    ) -> Tool:
        """A tool named after ``fn``, described by its docstring (the text before its
        sections; each parameter by its ``Args:`` or ``:param:`` entry), whose JSON schema and
        argument validation come from its annotations through pydantic (models, ``Literal``,
        enums, ``Annotated[..., Field(description=...)]``). The model's arguments are
        validated and converted before each call; a failure is an error result naming the
        field, which the model reads. Needs pydantic (``pip install 'agentctx-fast[tools]'``).
        """
        if name is None:
            name = getattr(fn, "__name__", None)
            if not isinstance(name, str):
                raise InvalidArgumentError(
                    f"tool from {type(fn).__name__}: it has no __name__; pass name="
                )
        from agentctx_fast.runner._function_tools import describe_function

        documented, parameters, validator = describe_function(fn, name)
        return cls(
            name,
            fn,
            documented if description is None else description,
            parameters,
            requires_approval=requires_approval,
            idempotent=idempotent,
            arguments_validator=validator,
        )

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _TOOL_NAME.fullmatch(self.name):
            raise InvalidArgumentError(
                f"tool name must be 1-64 characters of [A-Za-z0-9_-], got {self.name!r}"
            )
        if not callable(self.fn):
            raise InvalidArgumentError(f"tool {self.name!r}: fn must be callable")
        if not isinstance(self.description, str):
            raise InvalidArgumentError(f"tool {self.name!r}: description must be a str")
        if not isinstance(self.requires_approval, bool):
            raise InvalidArgumentError(f"tool {self.name!r}: requires_approval must be a bool")
        if not isinstance(self.idempotent, bool):
            raise InvalidArgumentError(f"tool {self.name!r}: idempotent must be a bool")
        if self.arguments_validator is not None and not callable(self.arguments_validator):
            raise InvalidArgumentError(f"tool {self.name!r}: arguments_validator must be callable")
        if self.parameters is None:
            object.__setattr__(self, "parameters", schema_of(self.fn))
        elif not isinstance(self.parameters, Mapping):
            raise InvalidArgumentError(f"tool {self.name!r}: parameters must be a JSON schema")
        if not self.description:
            object.__setattr__(self, "description", inspect.getdoc(self.fn) or "")

    @property
    def is_async(self) -> bool:
        """True when ``fn`` is a coroutine function: only the async runner can call it."""
        return is_async_callable(self.fn)

    def invoke(self, arguments: str) -> ToolOutcome:
        """Parse the call's JSON ``arguments``, call ``fn(**arguments)`` and render the result.

        Nothing escapes: malformed arguments, a raising tool or an unserialisable result all
        become an error outcome the model can read.
        """
        prepared = self._prepared(arguments)
        if isinstance(prepared, ToolOutcome):
            return prepared
        parsed, call = prepared
        try:
            result = self.fn(**call)
        except Exception as error:  # a tool's failure is a result the model can react to
            return self._failed(error, parsed)
        return self._render(result, parsed)

    async def ainvoke(self, arguments: str) -> ToolOutcome:
        """`invoke` for an ``async def`` tool: ``fn(**arguments)`` is awaited."""
        prepared = self._prepared(arguments)
        if isinstance(prepared, ToolOutcome):
            return prepared
        parsed, call = prepared
        try:
            result = await self.fn(**call)
        except Exception as error:  # a tool's failure is a result the model can react to
            return self._failed(error, parsed)
        return self._render(result, parsed)

    def invalid_arguments(self, arguments: str) -> ToolOutcome | None:
        """The error outcome of a call whose ``arguments`` would not reach ``fn`` (not a JSON
        object, or refused by the validator), or None: a call the user is asked to approve
        is first checked with this, so nobody approves a call that cannot run."""
        prepared = self._prepared(arguments)
        return prepared if isinstance(prepared, ToolOutcome) else None

    def _prepared(self, arguments: str) -> tuple[dict[str, Any], Mapping[str, Any]] | ToolOutcome:
        """The parsed arguments and the keyword arguments ``fn`` gets, or the error outcome the
        model reads (arguments that are not a JSON object, or refused by the validator)."""
        parsed = self._parse(arguments)
        if isinstance(parsed, ToolOutcome):
            return parsed
        call = self._validated(parsed)
        return call if isinstance(call, ToolOutcome) else (parsed, call)

    def _validated(self, parsed: dict[str, Any]) -> Mapping[str, Any] | ToolOutcome:
        """The keyword arguments of the call, or the error outcome the model reads."""
        if self.arguments_validator is None:
            return parsed
        try:
            return self.arguments_validator(parsed)
        except ValueError as error:
            return ToolOutcome(
                f"invalid arguments for tool {self.name}: {error}",
                is_error=True,
                page_request=_page_request(parsed),
            )
        except Exception as error:  # a validator's own failure: a result, as a tool's is
            return self._failed(error, parsed)

    def _parse(self, arguments: str) -> dict[str, Any] | ToolOutcome:
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except ValueError as error:
            return ToolOutcome(f"invalid arguments for tool {self.name}: {error}", is_error=True)
        except RecursionError:  # JSON nested thousands deep: model output, never a crash
            return ToolOutcome(
                f"invalid arguments for tool {self.name}: JSON nested too deeply", is_error=True
            )
        if not isinstance(parsed, dict):
            return ToolOutcome(
                f"invalid arguments for tool {self.name}: expected a JSON object, "
                f"got {type(parsed).__name__}",
                is_error=True,
            )
        return parsed

    def _failed(self, error: Exception, parsed: Mapping[str, Any]) -> ToolOutcome:
        return ToolOutcome(
            f"tool {self.name} failed: {type(error).__name__}: {error}",
            is_error=True,
            page_request=_page_request(parsed),
            error=error,
        )

    def _render(self, result: object, parsed: Mapping[str, Any]) -> ToolOutcome:
        page_request = _page_request(parsed)
        if isinstance(result, str):
            return ToolOutcome(result, page_request=page_request)
        if inspect.isawaitable(result):
            if inspect.iscoroutine(result):
                result.close()  # never awaited: no "coroutine was never awaited" warning
            return ToolOutcome(
                f"tool {self.name} returned an awaitable: an async tool runs only under "
                "AsyncAgentRunner",
                is_error=True,
                page_request=page_request,
            )
        if isinstance(result, ToolResultPage):
            try:
                text = result.to_text()
            except (TypeError, ValueError) as error:
                return _unserialisable(self.name, error, page_request)
            return ToolOutcome(text, truncated=result.truncated, page_request=page_request)
        try:
            return ToolOutcome(
                json.dumps(result, ensure_ascii=False, allow_nan=False), page_request=page_request
            )
        except (TypeError, ValueError, RecursionError) as error:
            return _unserialisable(self.name, error, page_request)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    idempotent: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
    idempotent: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """`Tool.from_function` as a decorator, bare (``@tool``) or with options
    (``@tool(name="lookup", requires_approval=True)``): the decorated name is the `Tool`; its
    function stays reachable as ``.fn``."""

    def make(function: Callable[..., Any]) -> Tool:
        return Tool.from_function(
            function,
            name=name,
            description=description,
            requires_approval=requires_approval,
            idempotent=idempotent,
        )

    return make if fn is None else make(fn)


def is_async_callable(fn: object) -> bool:
    """True for a coroutine function (or async generator function), a partial of one, or an
    object whose ``__call__`` is one."""
    return (
        inspect.iscoroutinefunction(fn)
        or inspect.isasyncgenfunction(fn)
        or (not inspect.isroutine(fn) and inspect.iscoroutinefunction(type(fn).__call__))
    )


def _page_request(parsed: Mapping[str, Any]) -> bool:
    return parsed.get("cursor") is not None


def _unserialisable(name: str, error: Exception, page_request: bool) -> ToolOutcome:
    return ToolOutcome(
        f"tool {name} returned a result that is not JSON-serialisable: {error}",
        is_error=True,
        page_request=page_request,
    )


def schema_of(fn: Callable[..., Any]) -> dict[str, Any]:
    """A JSON schema of ``fn``'s keyword parameters from its signature and annotations."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return {"type": "object", "properties": {}}
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolvable forward references: fall back to untyped properties
        hints = {}
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, parameter in signature.parameters.items():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        properties[name] = _schema_of_type(hints.get(name, parameter.annotation))
        if parameter.default is parameter.empty:
            required.append(name)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _schema_of_type(annotation: Any) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _schema_of_type(options[0]) if len(options) == 1 else {}
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(annotation))}
    kind = _JSON_TYPES.get(origin or annotation)
    return {"type": kind} if kind else {}
