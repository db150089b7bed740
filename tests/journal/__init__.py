"""Tests of bridge/journal/: the stores, their migrations, owners and leases."""
