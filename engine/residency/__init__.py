"""Residency: which models live on the device, in host RAM or on disk; footprints and tuned profiles."""
