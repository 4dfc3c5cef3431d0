"""Drop-in adapters for the places gateways and agent frameworks already fit context.

Each adapter lives in its own module and imports its framework only when that module is
imported, from an optional extra; a missing framework raises an ImportError naming the
extra to install. ``import contextfold`` never imports any of them.

- :mod:`contextfold.integrations.langchain` (``contextfold[langchain]``): pack a list of
  ``BaseMessage``, a ``trim_messages``-style Runnable, a ``create_agent`` middleware, a
  ``token_counter=``, and a drop-in ``ClearToolUsesEdit`` for LangChain's
  ``ContextEditingMiddleware``.
- :mod:`contextfold.integrations.langgraph` (``contextfold[langgraph]``): a
  ``pre_model_hook`` for the prebuilt ReAct agent.
- :mod:`contextfold.integrations.litellm` (``contextfold[litellm]``): a proxy hook and
  drop-ins for ``litellm.utils.trim_messages`` and ``litellm.token_counter``.
- :mod:`contextfold.integrations.pydantic_ai` (``contextfold[pydantic-ai]``): a history
  processor.
- :mod:`contextfold.integrations.openai_agents` (``contextfold[openai-agents]``): a
  ``call_model_input_filter`` packing the Responses input items of each model call.
- :mod:`contextfold.integrations.dask` (``contextfold[dask]``): pack stored JSONL
  transcripts on a Dask bag.
- :mod:`contextfold.integrations.asgi` (no extra): a middleware packing raw request bodies
  on the bytes path, for proxies in front of vLLM or SGLang.

Every adapter returns the caller's own message objects (by ``kept`` index of
:func:`contextfold.pack_handoff`) plus the note converted to the framework's message type.
"""
