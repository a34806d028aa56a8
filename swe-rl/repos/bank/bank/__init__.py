from bank.account import Account, InsufficientFunds, apply_interest, transfer

__all__ = ["Account", "InsufficientFunds", "apply_interest", "transfer"]
