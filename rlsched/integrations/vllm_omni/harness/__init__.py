"""What measures the plugin rather than serves with it: the CPU executor that stands in for a GPU
(``cost_executor``), the scheduler-in-the-loop comparison against the simulator (``loop``) and the
decision-overhead bench (``overhead``). Nothing in the serving path imports this package."""
