"""CometMQ: a persistent message queue that speaks the RocketMQ 4.x remoting protocol."""

__version__ = "0.1.0"
