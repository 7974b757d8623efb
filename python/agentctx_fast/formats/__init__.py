"""Wire formats: OpenAI chat, Responses and Anthropic messages to and from ours."""
