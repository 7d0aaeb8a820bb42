"""Host discovery: what devices, drivers and runtimes a machine has, from its tools."""
