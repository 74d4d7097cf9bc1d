"""The tamper-evident trail: the seal chain over events, exports, retention and redaction."""
