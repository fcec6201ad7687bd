"""The command line's commands, one module per family; each declares its commands into the `compaction`
group (cli/__init__.py) when cli/__init__.py imports it. What the families share (context, output,
completion, the tables' follow) stays in cli/.
"""
