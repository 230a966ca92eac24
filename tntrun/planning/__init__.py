"""Planning, pure: typed settings, the dataset's sizes and the machine facts in, a Plan out."""
