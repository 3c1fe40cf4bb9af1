"""The judge is offered an alias's answer whatever the endpoint a client called: a chat
completion, a text completion (/v1/completions) or the Responses API (/v1/responses), each read
as the text a user read (before, only a chat message was: a client could avoid the judge by
choosing the endpoint; found by a review)."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402
import pytest  # noqa: E402


class _AnyApi:
    """An OpenAI-compatible upstream on loopback answering 'Canberra.' on chat completions,
    text completions and the Responses API."""

    def __init__(self):
        import json
        import threading
        import time
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                usage = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
                if self.path.endswith("/chat/completions"):
                    out = {"id": "c", "object": "chat.completion", "created": int(time.time()), "model": body["model"],
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": "Canberra."}}], "usage": usage}
                elif self.path.endswith("/completions"):
                    out = {"id": "t", "object": "text_completion", "created": int(time.time()), "model": body["model"],
                           "choices": [{"index": 0, "finish_reason": "stop", "text": "Canberra.", "logprobs": None}],
                           "usage": usage}
                else:
                    out = {"id": "resp_1", "object": "response", "created_at": int(time.time()), "status": "completed",
                           "model": body["model"],
                           "output": [{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                                       "content": [{"type": "output_text", "text": "Canberra.", "annotations": []}]}],
                           "usage": {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7}}
                data = json.dumps(out).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("api", ["text_completion", "responses"])
async def test_an_alias_answer_to_a_completion_or_responses_request_is_offered_to_the_judge(api):
    """The spec: the judge grades 'a sampled share of alias answers'; an alias routes chat,
    completion and responses requests (checks.request_problem). served_answer's own contract:
    None only 'when there is no text answer to grade (a tool call alone, an embedding): the judge
    grades what a user read'. A /v1/completions or /v1/responses answer is text a user read, and
    LiteLLM's success event carries its prompt as `messages`; served_answer returns None for it,
    so a client that calls an alias on those endpoints is never judged."""
    import asyncio

    from litellm.integrations.custom_logger import CustomLogger

    from aisia_plugin.decision import Decision
    from aisia_plugin.litellm.judge import served_answer

    class Seen(CustomLogger):
        def __init__(self):
            super().__init__()
            self.events = []

        async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
            self.events.append((kwargs, response_obj))

    fake, seen, saved = _AnyApi(), Seen(), list(litellm.callbacks)
    litellm.callbacks = [seen]
    try:
        router = litellm.Router(model_list=[{"model_name": "m", "model_info": {"id": "m-1"},
                                             "litellm_params": {"model": "openai/m", "api_base": fake.base_url,
                                                                "api_key": "sk-fake"}}])
        if api == "text_completion":
            await router.atext_completion(model="m", prompt="Capital of Australia?")
        else:
            await router.aresponses(model="m", input="Capital of Australia?")
        for _ in range(300):
            if seen.events:
                break
            await asyncio.sleep(0.02)
        ((kwargs, response),) = seen.events
        assert kwargs.get("messages") == [{"role": "user", "content": "Capital of Australia?"}]
        decision = Decision("m-1", "openai/m", "contextual", "best", 1, 0.7, alias="auto", domain=None)
        served = served_answer(kwargs, response, decision, "m-1")
        assert served is not None, f"{type(response).__name__} answer 'Canberra.' is never offered to the judge"
        assert served.answer == "Canberra."
    finally:
        litellm.logging_callback_manager.remove_callback_from_all_lists(seen)
        litellm.callbacks = saved
        fake.close()
