"""Probes: narrow GPU measurements that settled a design question and may be run again (see README.md here)."""
