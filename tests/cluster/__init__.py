"""More than one host: netns hosts over ssh, a real Slurm cluster, shaped links."""
