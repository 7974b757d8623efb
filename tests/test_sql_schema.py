"""The SQL store's schema: pages are index ranges of one conversation."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from agentctx_fast import UserMessage
from store_fixtures import make_store


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_pages_read_one_conversation_s_own_index_range(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """A page is an index range of its conversation: on PostgreSQL the primary key leads with
    the conversation, so no plan walks other conversations' newer rows."""
    store = make_store(kind, request)
    try:
        name = store._tables.messages.name
        inspector = sa.inspect(store.engine)
        keys = inspector.get_pk_constraint(name)["constrained_columns"]
        indexed = {tuple(i["column_names"]) for i in inspector.get_indexes(name)}
        assert ("conversation_id", "seq") in {tuple(keys), *indexed}
        assert keys == (["seq"] if kind == "sqlite" else ["conversation_id", "seq"])
    finally:
        store.close()


@pytest.mark.parametrize("visible_only", [False, True], ids=["all", "visible"])
@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_the_page_statement_plans_an_index_range_scan(
    kind: str, visible_only: bool, request: pytest.FixtureRequest
) -> None:
    """EXPLAIN the statement a page read runs: an index scan of the conversation's range,
    newest first, with no sort and no walk of the table."""
    store = make_store(kind, request)
    try:
        for conversation in ("a", "b", "c"):
            store.chat_memory(conversation).add_messages_if_absent(
                [UserMessage(f"q{i}", message_id=f"m{i}") for i in range(300)]
            )
        statement = store._pages.get(visible_only, True, True)
        params = {"conversation_id": "b", "count": 40, "offset": 5}
        with store.engine.connect() as connection:
            if kind == "postgresql":
                connection.exec_driver_sql(f"ANALYZE {store._tables.messages.name}")
                connection.exec_driver_sql("SET enable_seqscan = off")  # tiny tables: no cheat
            compiled = statement.params(**params).compile(
                connection, compile_kwargs={"literal_binds": True}
            )
            prefix = "EXPLAIN QUERY PLAN " if kind == "sqlite" else "EXPLAIN "
            plan = " | ".join(
                str(row[-1] if kind == "sqlite" else row[0])
                for row in connection.exec_driver_sql(prefix + str(compiled))
            )
        prefix_name = store._tables.messages.name
        if kind == "sqlite":
            assert f"USING INDEX {prefix_name}_page (conversation_id=?)" in plan, plan
            assert "TEMP B-TREE" not in plan, plan
        else:
            assert "Index Scan Backward using" in plan, plan
            assert "Sort" not in plan and "Seq Scan" not in plan, plan
        memory = store.chat_memory("b")
        page = memory.get_model_messages(40) if visible_only else memory.get_messages(40, offset=5)
        expected = (
            [f"m{i}" for i in range(260, 300)]
            if visible_only
            else [f"m{i}" for i in range(255, 295)]
        )
        assert [m.message_id for m in page] == expected
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_schema_ddl_builds_a_working_store(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The DDL printed for users whose migrations are their own creates what the store needs:
    applied by hand, the store works without ``initialize()``, and ``initialize()`` then finds
    everything there."""
    from agentctx_fast import AgentRunner, AiMessage, ScriptedChatModel
    from agentctx_fast.runner import Agent
    from agentctx_fast.stores.sql import SqlAgentStore, schema_ddl

    url = (
        f"sqlite:///{tmp_path / 'ddl.db'}"
        if kind == "sqlite"
        else request.getfixturevalue("postgres_server").url
    )
    prefix = f"ddl{uuid.uuid4().hex[:8]}_"
    ddl = schema_ddl(url, table_prefix=prefix)
    assert ddl.count("CREATE TABLE") == 4 and f"{prefix}messages_visible" in ddl
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            for statement in ddl.split(";"):
                if statement.strip():
                    connection.exec_driver_sql(statement)
        store = SqlAgentStore(engine, table_prefix=prefix)
        turn = AgentRunner(store).run(
            Agent("a", ScriptedChatModel([AiMessage("hello")])), "conversation-1", "hi"
        )
        assert turn.final_message is not None and turn.final_message.text == "hello"
        assert len(store.chat_memory("conversation-1").get_messages()) == 2
        store.schema.initialize()  # idempotent over the hand-made tables
    finally:
        engine.dispose()


def test_schema_ddl_refuses_other_databases() -> None:
    from agentctx_fast import InvalidArgumentError
    from agentctx_fast.stores.sql import schema_ddl

    with pytest.raises(InvalidArgumentError, match="SQLite and PostgreSQL"):
        schema_ddl("mysql://user@host/db")
    with pytest.raises(InvalidArgumentError):
        schema_ddl("not a url")
    with pytest.raises(InvalidArgumentError):
        schema_ddl("sqlite://", table_prefix="bad prefix")
