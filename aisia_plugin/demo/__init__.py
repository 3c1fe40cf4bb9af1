"""The demo and test harness: simulated OpenAI-compatible upstreams (`upstream`), a LiteLLM
proxy process started with the plugin (`proxy`), and `aisia demo` built from both (`scenario`).

Nothing here imports LiteLLM: the proxy is a separate process spoken to over HTTP."""
