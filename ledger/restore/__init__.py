"""When the database goes back in time (a restore from backup, a failover that lost commits):
the witness that notices it (`witness`), and restore mode (`mode`), which puts in doubt what
may have moved, sets lost controls again and moves sequences forward."""
