"""An intranet-style HTTP API (employee directory + tickets) to wrap with toolbridge."""
