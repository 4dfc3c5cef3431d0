"""A LiteLLM logger for the proxy test: appends what contextfold put in each successful
call's metadata, as LiteLLM's loggers see it, to the JSON-lines file named by
``CONTEXTFOLD_TEST_REPORTS`` (loaded by the proxy from ``config.yaml`` by module path)."""

from __future__ import annotations

import json
import os
from typing import Any

from litellm.integrations.custom_logger import CustomLogger


class ReportRecorder(CustomLogger):
    """Records ``litellm_params["metadata"]["contextfold"]`` (or ``litellm_metadata``'s)."""

    async def async_log_success_event(
        self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        params = kwargs.get("litellm_params") or {}
        found = None
        for key in ("metadata", "litellm_metadata"):
            metadata = params.get(key)
            if isinstance(metadata, dict) and "contextfold" in metadata:
                found = metadata["contextfold"]
        with open(os.environ["CONTEXTFOLD_TEST_REPORTS"], "a", encoding="utf-8") as out:
            out.write(json.dumps({"call_type": kwargs.get("call_type"), "contextfold": found}) + "\n")


recorder = ReportRecorder()
