"""Tests of the AppBuilder-compatible emulator (bridge.emulator)."""
