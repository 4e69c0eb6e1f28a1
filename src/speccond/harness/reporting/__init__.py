"""Reports rebuilt from run directories alone: reading runs (runs.py), statistics (stats.py), the tables
and plots of a comparison (report.py and its parts), the final Holm tables and the GLUE table."""
