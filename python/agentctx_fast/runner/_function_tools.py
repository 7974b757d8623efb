"""Tools from typed functions (`Tool.from_function`, `@tool`): the JSON schema of a function's
parameters and the validation of a model's arguments, both by pydantic.

The parameters become the fields of a `TypedDict` that one `pydantic.TypeAdapter` serves twice:
its JSON schema is what the model is offered, and validating the call's parsed arguments against
it (pydantic's lax mode: ``"3"`` becomes ``3`` for an ``int``, a dict becomes the model instance
for a model parameter, omitted parameters take their defaults) gives the keyword arguments of the
call. This module is the only one importing pydantic, and only `Tool.from_function` imports it:
the core, the stores and plain `Tool`\\ s work without it.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any, Literal, NotRequired, cast

from agentctx_fast._extras import missing_dependency
from agentctx_fast.errors import InvalidArgumentError
from agentctx_fast.runner._docstrings import split_docstring

try:
    import pydantic
    from pydantic.fields import FieldInfo
    from pydantic.json_schema import GenerateJsonSchema
    from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12
except ImportError as _error:
    raise missing_dependency("tools", _error) from _error

_MAX_PROBLEMS = 8
_MAX_INPUT_CHARS = 60


class ArgumentsValidator:
    """The parsed JSON arguments of a call → the keyword arguments of the function; raises
    `ValueError` naming each bad field (its message is what the model reads)."""

    def __init__(self, adapter: pydantic.TypeAdapter[Any]) -> None:
        self._adapter = adapter

    def __call__(self, arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            validated: dict[str, Any] = self._adapter.validate_python(arguments)
        except pydantic.ValidationError as error:
            raise ValueError(_explained(error)) from None
        return validated


def describe_function(
    fn: Callable[..., Any], tool_name: str
) -> tuple[str, dict[str, Any], ArgumentsValidator]:
    """``fn``'s description (its docstring before the sections), the JSON schema of its
    parameters (described by the docstring's ``Args:`` or ``:param:`` entries unless their
    ``Annotated[..., Field(description=...)]`` says otherwise) and the validator of its
    arguments."""
    description, documented = split_docstring(inspect.getdoc(fn))
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as error:
        raise InvalidArgumentError(f"tool {tool_name!r}: no signature: {error}") from None
    hints = _hints(fn, tool_name)
    fields: dict[str, Any] = {}
    # An unknown argument is an error the model reads, not a TypeError from the call.
    extra: Literal["allow", "forbid"] = "forbid"
    for parameter in signature.parameters.values():
        if parameter.kind is parameter.VAR_POSITIONAL:
            continue
        if parameter.kind is parameter.VAR_KEYWORD:
            extra = "allow"
            continue
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise InvalidArgumentError(
                f"tool {tool_name!r}: parameter {parameter.name!r} is positional-only; a tool "
                "is called with keyword arguments"
            )
        fields[parameter.name] = _field(
            hints.get(parameter.name, Any), documented.get(parameter.name), parameter.default
        )
    arguments = cast(Any, TypedDict)(tool_name, fields)
    arguments = pydantic.with_config(pydantic.ConfigDict(extra=extra))(arguments)
    try:
        adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(arguments)
        schema = adapter.json_schema(schema_generator=_WithoutFieldTitles)
    except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError) as error:
        first_line = str(error).partition("\n")[0]
        raise InvalidArgumentError(
            f"tool {tool_name!r}: pydantic cannot validate its parameters: {first_line}"
        ) from None
    schema.pop("title", None)  # the tool's name, already sent beside the schema
    return description, schema, ArgumentsValidator(adapter)


def _hints(fn: Callable[..., Any], tool_name: str) -> dict[str, Any]:
    """The resolved annotations of ``fn`` (of the function a partial or callable wraps)."""
    target: object = fn
    if not inspect.isroutine(fn):
        target = getattr(fn, "func", None) or type(fn).__call__
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception as error:  # an unresolvable forward reference, say
        raise InvalidArgumentError(
            f"tool {tool_name!r}: cannot resolve its annotations: {error}"
        ) from None


def _field(annotation: Any, documented: str | None, default: Any) -> Any:
    """A TypedDict field: ``annotation`` with the docstring's description and the default
    (given first, so an ``Annotated`` ``Field`` of the parameter's own wins)."""
    metadata: list[Any] = []
    if documented:
        metadata.append(pydantic.Field(description=documented))
    if isinstance(default, FieldInfo):  # ``x: int = Field(3, description=...)``
        metadata.append(default)
    elif default is not inspect.Parameter.empty:
        metadata.append(pydantic.Field(default=default))
    if typing.get_origin(annotation) is typing.Annotated:
        base, *own = typing.get_args(annotation)
        metadata += own
        annotation = base
    if metadata:
        annotation = cast(Any, typing.Annotated)[(annotation, *metadata)]
    if default is inspect.Parameter.empty:
        return annotation
    return cast(Any, NotRequired)[annotation]


class _WithoutFieldTitles(GenerateJsonSchema):
    """Properties without the ``title`` pydantic derives from their names: tokens the model
    reads on every call that say nothing the name does not."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def _explained(error: pydantic.ValidationError) -> str:
    """``field.path: problem (got input)`` for each problem, joined by ``; ``."""
    problems = []
    for item in error.errors(include_url=False)[:_MAX_PROBLEMS]:
        where = ".".join(str(part) for part in item["loc"]) or "arguments"
        text = f"{where}: {item['msg']}"
        if item["type"] != "missing":
            text += f" (got {_short(item['input'])})"
        problems.append(text)
    if error.error_count() > _MAX_PROBLEMS:
        problems.append(f"and {error.error_count() - _MAX_PROBLEMS} more")
    return "; ".join(problems)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_INPUT_CHARS else text[: _MAX_INPUT_CHARS - 3] + "..."


__all__ = ["ArgumentsValidator", "describe_function"]
