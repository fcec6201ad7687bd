"""Reading a topic's table back: its snapshots and time travel (read.py), a changes feed between two
snapshots (feed.py), each log's lag behind its table (lag.py), and where a key's values are still
reachable (reach.py). Nothing here writes the table.
"""
