"""runfacts.processors"""
