"""hetpool: unified scheduling and governance of heterogeneous compute."""

__version__ = "0.1.0"
