"""Built-in knowledge: the device catalog (what each device model is and can do) and the
software-compatibility knowledge base (which framework versions a node can run).

Both ship as versioned YAML under `hetpool/catalog/data/`; operators extend them with
`DeviceModel` documents (`hetpool apply -f`) and a KB override file
(`HETPOOL_COMPAT_OVERRIDES`).
"""
