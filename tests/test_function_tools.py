"""Tools from typed functions (SPEC §22): `Tool.from_function` and `@tool` build the schema
with pydantic from the annotations and the docstring, and validate and convert the model's
arguments before the call; pydantic stays out of the core and the stores."""

from __future__ import annotations

import asyncio
import enum
import json
import subprocess
import sys
import textwrap
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from agentctx_fast import (
    Agent,
    AgentRunner,
    AiMessage,
    AsyncAgentRunner,
    AsyncInMemoryAgentStore,
    AsyncScriptedChatModel,
    InMemoryAgentStore,
    InvalidArgumentError,
    ScriptedChatModel,
    Tool,
    ToolMessage,
    TurnStatus,
    tool,
)
from agentctx_fast.runner._docstrings import split_docstring
from runner_helpers import call, calls, results_by_call


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(BaseModel):
    street: str
    postcode: Annotated[str, Field(description="The postal code.")]


class Shipment(BaseModel):
    address: Address
    express: bool = False


def test_schema_comes_from_the_annotations_and_the_google_docstring() -> None:
    def ship(
        shipment: Shipment,
        color: Color,
        mode: Literal["air", "sea"],
        qty: Annotated[int, Field(description="Units to ship.", ge=1)],
        tags: list[str] | None = None,
    ) -> str:
        """Ship an order.

        Use it once the order is paid.

        Args:
            shipment: Where and how.
            qty (int): Overridden by the annotation's description.
            tags: Labels for the carrier,
                printed on the box.

        Returns:
            The tracking number.
        """
        return "T-1"

    made = Tool.from_function(ship)
    assert made.name == "ship"
    assert made.description == "Ship an order.\n\nUse it once the order is paid."
    assert made.parameters == {
        "$defs": {
            "Address": {
                "properties": {
                    "street": {"type": "string"},
                    "postcode": {"description": "The postal code.", "type": "string"},
                },
                "required": ["street", "postcode"],
                "title": "Address",
                "type": "object",
            },
            "Color": {"enum": ["red", "blue"], "title": "Color", "type": "string"},
            "Shipment": {
                "properties": {
                    "address": {"$ref": "#/$defs/Address"},
                    "express": {"default": False, "type": "boolean"},
                },
                "required": ["address"],
                "title": "Shipment",
                "type": "object",
            },
        },
        "additionalProperties": False,
        "properties": {
            "shipment": {"$ref": "#/$defs/Shipment", "description": "Where and how."},
            "color": {"$ref": "#/$defs/Color"},
            "mode": {"enum": ["air", "sea"], "type": "string"},
            "qty": {"description": "Units to ship.", "minimum": 1, "type": "integer"},
            "tags": {
                "anyOf": [{"items": {"type": "string"}, "type": "array"}, {"type": "null"}],
                "default": None,
                "description": "Labels for the carrier, printed on the box.",
            },
        },
        "required": ["shipment", "color", "mode", "qty"],
        "type": "object",
    }


def test_rest_docstrings_describe_parameters_too() -> None:
    def fetch(url: str, timeout: float = 2.0) -> str:
        """Fetch a page.

        :param url: The address,
            absolute.
        :param float timeout: Seconds to wait.
        :returns: the body
        """
        return url

    made = Tool.from_function(fetch)
    assert made.description == "Fetch a page."
    assert made.parameters is not None
    assert made.parameters["properties"] == {
        "url": {"description": "The address, absolute.", "type": "string"},
        "timeout": {"default": 2.0, "description": "Seconds to wait.", "type": "number"},
    }


def test_docstring_sections_are_split() -> None:
    doc = """Summary.

    Args:
        *items: Things.
        **options (dict): More
            things.
        malformed entry without a colon
    Raises:
        ValueError: never a parameter.
    """
    assert split_docstring(doc) == ("Summary.", {"items": "Things.", "options": "More things."})
    assert split_docstring(None) == ("", {})


def test_the_decorator_bare_and_with_options() -> None:
    @tool
    def lookup(order_id: str) -> str:
        """Look an order up."""
        return order_id

    @tool(name="refund_order", description="Refund it.", requires_approval=True, idempotent=True)
    def refund(order_id: str) -> str:
        """Not this text."""
        return order_id

    assert isinstance(lookup, Tool) and lookup.name == "lookup"
    assert lookup.description == "Look an order up." and lookup.fn("x") == "x"
    assert (refund.name, refund.description) == ("refund_order", "Refund it.")
    assert refund.requires_approval and refund.idempotent


def test_arguments_are_validated_and_converted_before_the_call() -> None:
    received: list[dict[str, Any]] = []

    @tool
    def add_item(
        qty: int, shipment: Shipment, color: Color = Color.RED, tags: list[str] | None = None
    ) -> str:
        received.append({"qty": qty, "shipment": shipment, "color": color, "tags": tags})
        return "added"

    shipment = {"address": {"street": "Main St", "postcode": "75001"}}
    model = ScriptedChatModel(
        [
            calls(call("c1", "add_item", {"qty": "3", "shipment": shipment, "color": "blue"})),
            AiMessage("Added."),
        ]
    )
    turn = AgentRunner(InMemoryAgentStore()).run(Agent("a", model, tools=[add_item]), "c", "go")
    assert turn.status == TurnStatus.COMPLETED
    assert received == [
        {
            "qty": 3,
            "shipment": Shipment(address=Address(street="Main St", postcode="75001")),
            "color": Color.BLUE,
            "tags": None,
        }
    ]
    assert type(received[0]["shipment"]) is Shipment
    assert results_by_call(turn.messages)["c1"].text == "added"


def test_a_validation_failure_is_an_error_result_naming_the_field_and_the_loop_goes_on() -> None:
    received: list[int] = []

    @tool
    def set_quantity(qty: int, shipment: Shipment) -> str:
        received.append(qty)
        return "ok"

    bad = {"qty": "three", "shipment": {"address": {"street": "Main St"}}, "note": 1}
    model = ScriptedChatModel([calls(call("c1", "set_quantity", bad)), AiMessage("Sorry.")])
    turn = AgentRunner(InMemoryAgentStore()).run(Agent("a", model, tools=[set_quantity]), "c", "go")
    result = results_by_call(turn.messages)["c1"]
    assert received == [] and result.is_error
    assert result.text == (
        "invalid arguments for tool set_quantity: qty: Input should be a valid integer, unable "
        "to parse string as an integer (got 'three'); shipment.address.postcode: Field "
        "required; note: Extra inputs are not permitted (got 1)"
    )
    assert turn.status == TurnStatus.COMPLETED
    assert turn.final_message is not None and turn.final_message.text == "Sorry."
    second_window = model.calls[1].messages
    assert any(isinstance(m, ToolMessage) and m.is_error for m in second_window)


def test_an_async_function_tool_gets_converted_arguments_under_the_async_runner() -> None:
    received: list[object] = []

    @tool
    async def schedule(when: int, shipment: Shipment) -> str:
        """Schedule a pickup."""
        await asyncio.sleep(0)
        received.extend([when, shipment])
        return "scheduled"

    shipment = {"address": {"street": "Main St", "postcode": "75001"}}
    model = AsyncScriptedChatModel(
        [
            calls(call("c1", "schedule", {"when": "12", "shipment": shipment})),
            calls(call("c2", "schedule", {"when": "noon", "shipment": shipment})),
            AiMessage("Done."),
        ]
    )

    async def main() -> Any:
        runner = AsyncAgentRunner(AsyncInMemoryAgentStore())
        try:
            return await runner.run(Agent("a", model, tools=[schedule]), "c", "go")
        finally:
            await runner.aclose()

    turn = asyncio.run(main())
    assert schedule.is_async and turn.status == TurnStatus.COMPLETED
    assert received == [12, Shipment(address=Address(street="Main St", postcode="75001"))]
    results = results_by_call(turn.messages)
    assert results["c1"].text == "scheduled" and not results["c1"].is_error
    assert results["c2"].is_error and results["c2"].text.startswith(
        "invalid arguments for tool schedule: when: Input should be a valid integer"
    )


def test_a_call_needing_approval_with_bad_arguments_is_answered_without_asking() -> None:
    @tool(requires_approval=True)
    def refund(amount: float) -> str:
        return "refunded"

    model = ScriptedChatModel(
        [calls(call("c1", "refund", {"amount": "a lot"})), AiMessage("I could not refund.")]
    )
    turn = AgentRunner(InMemoryAgentStore()).run(Agent("a", model, tools=[refund]), "c", "go")
    assert turn.status == TurnStatus.COMPLETED and turn.pending_approvals == ()
    result = results_by_call(turn.messages)["c1"]
    assert result.is_error and result.text.startswith("invalid arguments for tool refund: amount")


def test_the_plain_constructor_keeps_passing_arguments_as_parsed() -> None:
    received: list[object] = []
    plain = Tool("count", lambda qty: received.append(qty) or "ok")
    assert plain.arguments_validator is None
    assert plain.invoke('{"qty": "3"}').text == "ok" and received == ["3"]


def test_a_validator_of_ones_own_and_its_failures() -> None:
    def doubled(arguments: dict[str, Any]) -> dict[str, Any]:
        if "n" not in arguments:
            raise ValueError("n is required")
        if arguments["n"] == 0:
            raise RuntimeError("validator bug")
        return {"n": arguments["n"] * 2}

    made = Tool("double", lambda n: str(n), arguments_validator=doubled)
    assert made.invoke('{"n": 2}').text == "4"
    assert made.invoke("{}").text == "invalid arguments for tool double: n is required"
    broken = made.invoke('{"n": 0}')
    assert broken.is_error and broken.text == "tool double failed: RuntimeError: validator bug"
    with pytest.raises(InvalidArgumentError, match="arguments_validator must be callable"):
        Tool("double", lambda n: n, arguments_validator=1)  # type: ignore[arg-type]


def test_functions_a_tool_cannot_be_made_of_are_refused() -> None:
    def positional(a: int, /) -> None: ...

    def unresolvable(a: Missing) -> None: ...  # type: ignore[name-defined]  # noqa: F821

    def opaque(a: asyncio.Lock) -> None: ...

    with pytest.raises(InvalidArgumentError, match="'a' is positional-only"):
        Tool.from_function(positional)
    with pytest.raises(InvalidArgumentError, match="cannot resolve its annotations"):
        Tool.from_function(unresolvable)
    with pytest.raises(InvalidArgumentError, match="pydantic cannot validate its parameters"):
        Tool.from_function(opaque)
    with pytest.raises(InvalidArgumentError, match="pass name="):
        Tool.from_function(json.JSONDecoder())


def test_keyword_catch_alls_accept_extra_arguments() -> None:
    def tagged(name: str, **labels: str) -> str:
        return json.dumps({"name": name, **labels}, sort_keys=True)

    made = Tool.from_function(tagged)
    assert made.parameters is not None and made.parameters["additionalProperties"] is True
    assert made.invoke('{"name": "n", "team": "a"}').text == '{"name": "n", "team": "a"}'


def test_the_core_and_the_stores_import_without_pydantic() -> None:
    # pydantic (and what it brings) hidden: importing it raises ImportError.
    script = textwrap.dedent(
        """
        import sys
        sys.modules["pydantic"] = None
        import agentctx_fast
        from agentctx_fast import (
            Agent, AgentRunner, AiMessage, InMemoryAgentStore, MissingDependencyError,
            ScriptedChatModel, Tool, UserMessage, build_window, tool,
        )
        import agentctx_fast.stores.sql, agentctx_fast.stores.redis, agentctx_fast.runner

        assert len(build_window([UserMessage("hi")]).messages) == 1
        plain = Tool("echo", lambda text: text)
        model = ScriptedChatModel([
            AiMessage(tool_calls=(agentctx_fast.ToolCall("c1", "echo", '{"text": "x"}'),)),
            AiMessage("done"),
        ])
        turn = AgentRunner(InMemoryAgentStore()).run(Agent("a", model, tools=[plain]), "c", "go")
        assert turn.final_message.text == "done"
        try:
            tool(lambda text: text)
        except MissingDependencyError as error:
            print(error)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "pydantic is not installed; install the extra: pip install 'agentctx-fast[tools]'\n"
    )
