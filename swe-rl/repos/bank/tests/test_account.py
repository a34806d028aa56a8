import unittest

from bank import Account, InsufficientFunds, apply_interest, transfer


class AccountTest(unittest.TestCase):
    def test_deposit_and_withdraw(self):
        acc = Account("ann", 100)
        self.assertEqual(acc.deposit(50), 150)
        self.assertEqual(acc.withdraw(30), 120)
        self.assertEqual(acc.history, [("deposit", 50), ("withdraw", 30)])

    def test_rejects_non_positive_amounts(self):
        acc = Account("ann", 100)
        for bad in (0, -5):
            with self.assertRaises(ValueError):
                acc.deposit(bad)
            with self.assertRaises(ValueError):
                acc.withdraw(bad)
        self.assertEqual(acc.balance, 100)

    def test_rejects_negative_opening_balance(self):
        with self.assertRaises(ValueError):
            Account("ann", -1)
        with self.assertRaises(ValueError):
            Account("ann", 0, overdraft=-1)

    def test_overdraft(self):
        acc = Account("bob", 10, overdraft=20)
        self.assertEqual(acc.available(), 30)
        self.assertEqual(acc.withdraw(30), -20)
        with self.assertRaises(InsufficientFunds):
            acc.withdraw(1)

    def test_withdraw_all_without_overdraft(self):
        acc = Account("cy", 40)
        self.assertEqual(acc.withdraw(40), 0)
        with self.assertRaises(InsufficientFunds):
            acc.withdraw(1)


class BankTest(unittest.TestCase):
    def test_transfer(self):
        a, b = Account("a", 100), Account("b", 5)
        transfer(a, b, 60)
        self.assertEqual((a.balance, b.balance), (40, 65))

    def test_failed_transfer_changes_nothing(self):
        a, b = Account("a", 10), Account("b", 0)
        with self.assertRaises(InsufficientFunds):
            transfer(a, b, 11)
        self.assertEqual((a.balance, b.balance), (10, 0))

    def test_interest(self):
        acc = Account("d", 1050)
        self.assertEqual(apply_interest(acc, 10), 105)
        self.assertEqual(acc.balance, 1155)

    def test_no_interest_on_small_or_negative_balance(self):
        self.assertEqual(apply_interest(Account("e", 9), 10), 0)
        acc = Account("f", 0, overdraft=100)
        acc.withdraw(50)
        self.assertEqual(apply_interest(acc, 10), 0)
        self.assertEqual(acc.balance, -50)
