"""The console's views. `runs`: the runs list and a run's page with every action it offers;
`fleet`: the overview and bulk actions."""
