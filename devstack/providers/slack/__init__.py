"""A fake Slack (`fake`: the Web API's chat.postMessage and conversations.history, and signed
Events API callbacks) and what the crash test calls through slack_sdk (`caller`)."""
