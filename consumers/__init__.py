"""The loops: synthesis worker, command-line clients and the demo, on aiokafka."""
