"""runfacts.projections"""
