"""LLM access for data building and readers: an OpenAI-compatible client with a persistent
cache, a local OpenAI-compatible server, robust output parsing and the LLM data steps."""

from gsr_train.llm.cache import ResponseCache, request_key
from gsr_train.llm.client import ChatClient, ChatRequest, ChatResult, LLMConfig, LLMRequestError
from gsr_train.llm.usage import UsageStats

__all__ = [
    "ChatClient",
    "ChatRequest",
    "ChatResult",
    "LLMConfig",
    "LLMRequestError",
    "ResponseCache",
    "UsageStats",
    "request_key",
]
