"""Bank accounts holding whole cents, with an optional overdraft limit."""


class InsufficientFunds(Exception):
    pass


class Account:
    def __init__(self, owner, balance=0, overdraft=0):
        if balance < 0 or overdraft < 0:
            raise ValueError("the opening balance and the overdraft must not be negative")
        self.owner = owner
        self.balance = balance
        self.overdraft = overdraft
        self.history = []

    def deposit(self, amount):
        if amount <= 0:
            raise ValueError("a deposit must be positive")
        self.balance += amount
        self.history.append(("deposit", amount))
        return self.balance

    def available(self):
        """What can still be withdrawn: the balance plus the overdraft."""
        return self.balance + self.overdraft

    def withdraw(self, amount):
        if amount <= 0:
            raise ValueError("a withdrawal must be positive")
        if amount > self.available():
            raise InsufficientFunds(f"{self.owner} cannot withdraw {amount}")
        self.balance -= amount
        self.history.append(("withdraw", amount))
        return self.balance


def transfer(source, target, amount):
    """Move `amount` from `source` to `target`; nothing changes if `source` cannot pay."""
    source.withdraw(amount)
    target.deposit(amount)


def apply_interest(account, rate_percent):
    """Credit interest (rounded down to whole cents) on a positive balance; return the interest."""
    interest = 0
    if account.balance > 0:
        interest = account.balance * rate_percent // 100
    if interest > 0:
        account.deposit(interest)
    return interest
