"""build_chat_model: offline by default, OpenAI-compatible when configured, clear errors otherwise."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from core.chat.offline import OfflineChatModel
from core.config import ModelSettings, Settings
from sinks.chat.factory import build_chat_model
from sinks.chat.openai_chat import OpenAIChatModel
from tests.sinks.chat.chat_server import ChatServer


def test_the_default_is_offline() -> None:
    assert isinstance(build_chat_model(ModelSettings()), OfflineChatModel)


def test_offline_with_a_model_name_is_refused() -> None:
    with pytest.raises(ValueError, match=r"chat_model.model .*MEMSTREAM_CHAT_MODEL__PROVIDER=openai"):
        build_chat_model(ModelSettings(model="gpt-4o-mini"))


@pytest.mark.parametrize(
    ("config", "match"),
    [
        (
            ModelSettings(provider="openai", model="gpt-4o-mini"),
            "chat_model.base_url .*MEMSTREAM_CHAT_MODEL__BASE_URL",
        ),
        (
            ModelSettings(provider="openai", base_url="http://127.0.0.1:8000/v1"),
            "chat_model.model .*MEMSTREAM_CHAT_MODEL__MODEL",
        ),
    ],
)
def test_openai_without_base_url_or_model_names_the_setting(config: ModelSettings, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_chat_model(config)


async def test_openai_from_environment_variables(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTREAM_CHAT_MODEL__PROVIDER", "openai")
    monkeypatch.setenv("MEMSTREAM_CHAT_MODEL__BASE_URL", chat_server.url)
    monkeypatch.setenv("MEMSTREAM_CHAT_MODEL__API_KEY", "sk-env")
    monkeypatch.setenv("MEMSTREAM_CHAT_MODEL__MODEL", "llama-3.1-8b-instruct")
    monkeypatch.setenv("MEMSTREAM_CHAT_MODEL__MAX_RETRIES", "0")
    model = build_chat_model(Settings().chat_model)
    assert isinstance(model, OpenAIChatModel) and model.model_id == "llama-3.1-8b-instruct"
    draft = await model.summarize(None, [], max_tokens=20)
    await model.close()
    (request,) = chat_server.requests
    assert request.headers["authorization"] == "Bearer sk-env"
    assert request.body["model"] == "llama-3.1-8b-instruct" and draft.content == "ok"


def test_api_key_is_optional_for_local_servers() -> None:
    model = build_chat_model(
        ModelSettings(provider="openai", base_url="http://127.0.0.1:8000/v1", model="m", api_key=None)
    )
    assert isinstance(model, OpenAIChatModel)
    assert (
        build_chat_model(
            ModelSettings(provider="openai", base_url="http://x/v1", model="m", api_key=SecretStr("k"))
        ).model_id
        == "m"
    )
