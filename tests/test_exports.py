"""The public API: every name in `bridge.__all__` resolves, and nothing else is promised."""

from __future__ import annotations

import importlib

import pytest

import bridge


def test_all_is_sorted_and_unique() -> None:
    assert list(bridge.__all__) == sorted(set(bridge.__all__))


@pytest.mark.parametrize("name", bridge.__all__)
def test_every_public_name_resolves(name: str) -> None:
    value = getattr(bridge, name)
    assert value is not None
    assert name in dir(bridge)


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = bridge.nope  # type: ignore[attr-defined]


def test_migration_names_match_the_official_sdk() -> None:
    # Users migrate from appbuilder-sdk by changing the import only.
    for name in ("manifest", "manifest_parameter", "manifest_return", "Manifest"):
        assert callable(getattr(bridge, name))
    assert callable(bridge.Manifest.from_function)


def test_every_platform_adapter_is_exported() -> None:
    # Each platform of the registry is reachable as `from bridge import <Adapter>`, the same
    # class the registry builds.
    from bridge.platforms.registry import PLATFORMS

    for entry in PLATFORMS.values():
        module, _, name = entry.factory.partition(":")
        assert name in bridge.__all__, f"{name} ({entry.name}) is not exported"
        assert getattr(bridge, name) is getattr(importlib.import_module(module), name)


def test_low_level_clients_are_not_exported() -> None:
    # The public API is the loop's: raw HTTP clients stay in their platform's package.
    assert "AppBuilderClient" not in bridge.__all__
    with pytest.raises(AttributeError):
        _ = bridge.AppBuilderClient  # type: ignore[attr-defined]
    from bridge.platforms.appbuilder import AppBuilderClient

    assert AppBuilderClient.__module__.startswith("bridge.platforms.appbuilder")


def test_every_module_declares_all() -> None:
    import pkgutil

    missing = []
    for info in pkgutil.walk_packages(bridge.__path__, "bridge."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        if not hasattr(module, "__all__"):
            missing.append(info.name)
    assert missing == []
