"""What starts the runs: the sensors (sensors.py), the schedules (schedules.py), and the landing backlog the
discovery sensor observes (landing.py).
"""
