"""The plan: layout, batch split, schedules and their chart, the dry run, devices, scaling."""
