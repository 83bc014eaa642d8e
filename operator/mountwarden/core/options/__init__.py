"""Mount options: what each one means, what a spelling normalizes to, and what the kernel really does with it.

- ``table``: the NFS client's option table (kind, origin, concern, kernel default, meaning, effect);
- ``syntax``: splitting option strings into tokens;
- ``normalize``: parsing, normalizing and validating options, and what is in effect;
- ``presets``: the cache-policy presets, ``presetsheet`` and ``kernelfacts`` the promises the kernel lab measured;
- ``compare``: declared against observed options; ``explain``: what each option means and costs.
"""
