"""runfacts.connectors"""
