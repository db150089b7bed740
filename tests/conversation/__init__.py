"""Tests of the conversation loop: Bridge, Conversation, options, tool choice, resume."""
