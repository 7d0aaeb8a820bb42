"""The API's reason texts: why a candidate was rejected or a task waits.

The scheduling core and the catalog name their reasons in English (REASON_* in
scheduling/filters.py, assign.py, cycle.py; R_* in catalog/compat.py) and know nothing of
languages; the API passes those words on unchanged. They are listed here, marked for
extraction, so that the dashboard's catalogs translate them like any other text
(`Translator.reason`). tests/web/test_i18n.py fails when the core gains a reason this list
lacks."""

from __future__ import annotations

from hetpool.web.i18n import N_

REASON_TEXTS = (
    # scheduling: filters and assignment
    N_("incompatible software stack"),
    N_("missing required device features"),
    N_("device memory below min_memory_gb"),
    N_("pool reserved for other tenants"),
    N_("pool does not allow fractional devices"),
    N_("node unhealthy or not schedulable"),
    N_("not enough free devices"),
    N_("fewer devices per node than requested"),
    N_("not enough free CPU"),
    N_("not enough free host memory"),
    N_("node has fewer CPU cores than requested"),
    N_("node has less host memory than requested"),
    N_("not enough nodes for all workers at once (gang)"),
    N_("device class does not match"),
    N_("slice larger than one device"),
    N_("node excluded by the task"),
    N_("node held for a blocked queue head"),
    N_("pool not available to the task's queue"),
    N_("no single node / network group / zone holds all workers"),
    N_("no NVLink/HCCS island with enough free devices"),
    N_("unknown device model or pool"),
    N_("no pool offers the requested devices"),
    # scheduling: the cycle
    N_("set aside"),
    N_("quota exceeded"),
    # catalog: software compatibility
    N_("unknown framework"),
    N_("framework not supported on device"),
    N_("software stack unknown"),
    N_("software stack does not match device runtime"),
    N_("no known framework release matches"),
    N_("driver too old for framework"),
    N_("CANN version cannot run framework version"),
    N_("runtime version cannot run framework version"),
    N_("runtime version not in knowledge base"),
    N_("framework not installed"),
    N_("installed framework version does not match"),
    N_("installed framework build does not match device"),
    N_("extra not supported"),
    N_("extra not installed"),
    N_("installed extra version does not match"),
)
