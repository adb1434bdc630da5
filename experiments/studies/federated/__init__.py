"""The federated study: many clients, partial participation, a deadline,
and its report."""
