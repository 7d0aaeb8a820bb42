"""Built-in knowledge: the device catalog (what each device model is and can do) and the
software-compatibility knowledge base (which framework versions a node can run).

Both ship as YAML under `hetpool/catalog/data/` (the KB as sourced tables in `data/compat/`); operators extend them with
`DeviceModel` and `CompatibilityRule` documents (`hetpool apply -f`) and a directory of table files
(`HETPOOL_COMPAT_OVERRIDES`).
"""
