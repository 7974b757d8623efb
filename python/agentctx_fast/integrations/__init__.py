"""Integrations with other libraries; each lives in its own module so its extra stays optional.

``agentctx_fast.integrations.langchain`` needs the ``langchain`` extra;
``agentctx_fast.integrations.openai_agents`` the ``openai-agents`` extra.
"""
