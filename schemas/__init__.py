"""runfacts.schemas"""
