"""voxledger.tasks"""
