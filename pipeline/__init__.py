"""The stages of one request: text front-end, audio I/O, voices, engines, encoding, storage.
No Kafka client lives here; `consumers/` drives these stages."""
